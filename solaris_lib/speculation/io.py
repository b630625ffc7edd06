"""Atomic, deterministic parquet partitions for the speculation stages (Spark)."""

from __future__ import annotations

import logging

from solaris_lib.errors import EmptyInputError
from solaris_lib.intervals import Interval, key_to_start
from solaris_lib.layout import join
from solaris_lib.storage import atomic_folder, filesystem, is_complete

log = logging.getLogger(__name__)


def write_partition(df, path: str, order_by: list[str], partitions: int = 1) -> int:
    """Replace ``path`` atomically with ``df`` sorted by ``order_by``; returns rows written.

    Rows are range-partitioned on the sort keys, so a rerun writes the same rows in the same files.
    """
    df = df.repartitionByRange(partitions, *order_by).sortWithinPartitions(*order_by)
    df = df.cache()
    try:
        rows = df.count()
        with atomic_folder(path) as staging:
            df.write.mode("overwrite").parquet(staging)
    finally:
        df.unpersist()
    log.info("wrote %d rows to %s", rows, path)
    return rows


def read_partition(spark, path: str):
    """A complete partition as a DataFrame; :class:`EmptyInputError` when it is missing/partial."""
    if not is_complete(path):
        raise EmptyInputError(f"{path} is missing or incomplete (no _SUCCESS): run its job first")
    return spark.read.parquet(path)


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


def newest_key_at_or_before(stage_table_root: str, interval: Interval) -> str | None:
    """The newest complete partition whose key is <= ``interval.key`` (no ``now()``)."""
    eligible = [k for k in complete_keys(stage_table_root) if key_to_start(k) <= interval.start]
    return eligible[-1] if eligible else None
