"""Work done inside DAG tasks that is not a Spark job (sensors, promotion)."""

from __future__ import annotations

import logging
import time

from solaris_lib.config import load_settings
from solaris_lib.intervals import Interval, parse_duration
from solaris_lib.layout import DataLayout, join
from solaris_lib.logs.schema import hour_partition
from solaris_lib.storage import filesystem, is_complete, list_files

log = logging.getLogger(__name__)


def hour_complete(folder: str, quiet_s: float, now: float | None = None) -> bool:
    """The log producer's contract (docs/pipeline.md): an hour partition is complete when it
    holds the ``_SUCCESS`` marker, or when it holds parquet files and none was written in the
    last ``quiet_s`` seconds (files still arriving keep the hour open)."""
    if is_complete(folder):
        return True
    files = list_files(folder)
    if not files:
        return False
    fs, _ = filesystem(folder)
    newest = max(info.mtime.timestamp() for info in
                 fs.get_file_info([filesystem(path)[1] for path in files]))
    return (time.time() if now is None else now) - newest >= quiet_s


def missing_log_partitions(logs_root: str, interval: Interval,
                           last_hours: int | None = None, quiet_s: float = 0.0) -> list[str]:
    """Hour partitions of ``interval`` (only its final ``last_hours`` when given) that are not
    complete yet (:func:`hour_complete`)."""
    missing = []
    hours = list(interval.hours())
    for hour in hours[-last_hours:] if last_hours else hours:
        folder = join(logs_root, hour_partition(hour))
        if not hour_complete(folder, quiet_s):
            missing.append(folder)
    return missing


def logs_ready(start: str, end: str, last_hours: int | None = None) -> bool:
    """Sensor poke: True once every hour partition of ``[start, end)`` (or of its final
    ``last_hours``) is complete (``_SUCCESS``, or quiet for ``SOLARIS_LOG_QUIET_PERIOD``)."""
    interval = Interval.parse(start, end)
    settings = load_settings()
    layout = DataLayout.from_settings(settings)
    quiet_s = parse_duration(settings.log_quiet_period).total_seconds()
    missing = missing_log_partitions(layout.logs, interval, last_hours, quiet_s)
    if missing:
        log.info("waiting for %d of %d log partitions of %s, first missing: %s",
                 len(missing), len(list(interval.hours())), interval, missing[0])
        return False
    log.info("all log partitions of %s are present", interval)
    return True
