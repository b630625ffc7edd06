"""Work done inside DAG tasks that is not a Spark job (sensors, promotion)."""

from __future__ import annotations

import logging

from solaris_lib.config import load_settings
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout, join
from solaris_lib.logs.schema import hour_partition
from solaris_lib.storage import list_files

log = logging.getLogger(__name__)


def missing_log_partitions(logs_root: str, interval: Interval,
                           last_hours: int | None = None) -> list[str]:
    """Hour partitions of ``interval`` (only its final ``last_hours`` when given) that hold no
    parquet file yet."""
    missing = []
    hours = list(interval.hours())
    for hour in hours[-last_hours:] if last_hours else hours:
        folder = join(logs_root, hour_partition(hour))
        if not list_files(folder):
            missing.append(folder)
    return missing


def logs_ready(start: str, end: str, last_hours: int | None = None) -> bool:
    """Sensor poke: True once every hour partition of ``[start, end)`` (or of its final
    ``last_hours``) has arrived."""
    interval = Interval.parse(start, end)
    layout = DataLayout.from_settings(load_settings())
    missing = missing_log_partitions(layout.logs, interval, last_hours)
    if missing:
        log.info("waiting for %d of %d log partitions of %s, first missing: %s",
                 len(missing), len(list(interval.hours())), interval, missing[0])
        return False
    log.info("all log partitions of %s are present", interval)
    return True
