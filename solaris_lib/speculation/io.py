"""Atomic, deterministic parquet partitions for the speculation stages (Spark)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from solaris_lib.errors import ConfigError, EmptyInputError
from solaris_lib.intervals import Interval, key_to_start, parse_timestamp
from solaris_lib.layout import join
from solaris_lib.sparkutil import read_parquet
from solaris_lib.storage import (
    atomic_folder,
    exists,
    filesystem,
    is_complete,
    read_text,
    write_text,
)

log = logging.getLogger(__name__)
TRAINED_UNTIL = "_trained_until"  # a retrieval partition's end of logs fitted on (ISO-8601)
LEGACY_TRAINED_FOR = timedelta(days=1)  # a partition without it: the retrieval DAG's schedule
RETRIEVAL_USED = "_retrieval"  # a speculated partition's retrieval keys (retrieval_record)


def write_partition(df, path: str, order_by: list[str], partitions: int = 1,
                    markers: dict[str, str] | None = None) -> int:
    """Replace ``path`` atomically with ``df`` sorted by ``order_by``; returns rows written.

    Rows are range-partitioned on the sort keys, so a rerun writes the same rows in the same files.
    ``markers``: {file name: text} written beside the data, published with it (names start
    with ``_``: readers of the data skip them).
    """
    df = df.repartitionByRange(partitions, *order_by).sortWithinPartitions(*order_by)
    df = df.cache()
    try:
        rows = df.count()
        with atomic_folder(path) as staging:
            df.write.mode("overwrite").parquet(staging)
            for name, text in (markers or {}).items():
                write_text(join(staging, name), text)
    finally:
        df.unpersist()
    log.info("wrote %d rows to %s", rows, path)
    return rows


def read_partition(spark, path: str):
    """A complete partition as a DataFrame; :class:`EmptyInputError` when it is missing/partial."""
    if not is_complete(path):
        raise EmptyInputError(f"{path} is missing or incomplete (no _SUCCESS): run its job first")
    return read_parquet(spark, path)


def complete_keys(stage_table_root: str) -> list[str]:
    """Interval keys of the complete partitions under ``<root>/interval=KEY``, sorted."""
    from pyarrow import fs as pafs

    fs, inner = filesystem(stage_table_root)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return []
    keys = []
    for info in fs.get_file_info(pafs.FileSelector(inner)):
        name = info.base_name
        if info.type == pafs.FileType.Directory and name.startswith("interval="):
            key = name.split("=", 1)[1]
            if is_complete(join(stage_table_root, name)):
                keys.append(key)
    return sorted(keys)


def write_trained_until(folder: str, end: datetime) -> None:
    """Mark ``folder`` (a retrieval partition being staged) as fitted on logs up to ``end``."""
    write_text(join(folder, TRAINED_UNTIL), end.isoformat())


def trained_until(stage_table_root: str, key: str) -> datetime:
    """When the logs partition ``key`` was fitted on end: its marker, or (written before the
    marker existed) its start plus :data:`LEGACY_TRAINED_FOR`."""
    marker = join(stage_table_root, f"interval={key}", TRAINED_UNTIL)
    if not exists(marker):
        return key_to_start(key) + LEGACY_TRAINED_FOR
    return parse_timestamp(read_text(marker))


def retrieval_record(interval: Interval, current: str | None, previous: str | None) -> str:
    """The :data:`RETRIEVAL_USED` marker of a speculate run of ``interval``: the retrieval
    partitions it read for its own features (``current``) and for those of the labelled
    previous interval (``previous``); None: it read none."""
    import json

    return json.dumps({**interval.record(), "current": current, "previous": previous})


def retrieval_used(speculated: str, interval: Interval) -> dict | None:
    """{"current", "previous"} (keys or None) of the :data:`RETRIEVAL_USED` marker of the
    complete speculated partition ``speculated``, when a run of ``interval`` wrote it; None
    when there is no such partition or marker, a run of another interval with the same start
    wrote it, or it is not such a record (with a warning)."""
    import json

    marker = join(speculated, RETRIEVAL_USED)
    if not is_complete(speculated) or not exists(marker):
        return None
    try:
        record = json.loads(read_text(marker))
        written_by = Interval.from_record(record)
        keys = {"current": record["current"], "previous": record["previous"]}
        if not all(key is None or isinstance(key, str) for key in keys.values()):
            raise TypeError(f"keys {keys} are neither strings nor null")
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        log.warning("%s is not a retrieval record (%s): ignored", marker, exc)
        return None
    if written_by != interval:
        log.info("%s records a run of %s: not followed by a run of %s", marker, written_by,
                 interval)
        return None
    return keys


def fitted_by(stage_table_root: str, key: str, end: datetime) -> bool:
    """True when the retrieval partition ``key`` was fitted on logs that end at or before
    ``end`` (a run of an interval ending at ``end`` may read it: it saw none of its future)."""
    return key_to_start(key) < end and trained_until(stage_table_root, key) <= end


def newest_trained_by(stage_table_root: str, end: datetime) -> str | None:
    """The newest complete partition fitted on logs that end at or before ``end`` (no
    ``now()``): a run, its rerun and a backfill of an interval ending at ``end`` read the same
    vectors, and none of them saw a log row after ``end``. A partition is keyed by its start,
    so a daily retrieval partition keyed within an hourly interval's day holds that day's
    later hours: it is passed over until the day has ended."""
    for key in reversed(complete_keys(stage_table_root)):
        if fitted_by(stage_table_root, key, end):
            return key
    return None
