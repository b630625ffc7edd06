"""The publisher's Spark work besides validation: item-id sizes, the memory estimate per
cluster slot, and the write.

pyspark is imported inside the functions; the executor-side work is the numpy code of
``memory`` and ``writer``, shipped through ``mapInArrow``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris_lib.cache import memory
from solaris_lib.cache.nodes import user_slots
from solaris_lib.cache.writer import STATS_DDL, WriteTarget, write_partition


def field_sizes():
    """Columns ``lp`` and ``ht``: bytes of the row's item id as a listpack entry and as a
    hashtable field (dictEntry + sds), the SQL twin of ``memory.listpack_int_bytes`` and
    ``memory.hashtable_field_bytes`` (tests hold the two equal)."""
    from pyspark.sql import functions as F

    item = F.col("item_id")
    listpack = (F.when(item <= 127, 2).when(item <= 4095, 3).when(item <= 32767, 4)
                .when(item <= 8388607, 5).when(item <= 2147483647, 6).otherwise(10))
    hashtable = memory.DICT_ENTRY + (F.when(item < 10**6, 8).when(item < 10**14, 16)
                                     .otherwise(32))
    return listpack.alias("lp"), hashtable.alias("ht")


def cluster_field_sizes():
    """Columns ``lp`` and ``ht`` of a ``c<cluster_id>`` field (from ``cluster_id``): the SQL
    twin of ``memory.listpack_cluster_bytes`` and ``memory.hashtable_cluster_bytes``."""
    from pyspark.sql import functions as F

    length = F.length(F.col("cluster_id").cast("string")) + 1
    listpack = length + 2  # a string entry below 64 bytes: 1 header + bytes + 1 back-length
    hashtable = memory.DICT_ENTRY + F.when(length + 2 <= 8, 8).otherwise(16)
    return listpack.alias("lp"), hashtable.alias("ht")


def _user_slots(batches: Iterator[pa.RecordBatch], value_bytes: int, key_head: int,
                limits: memory.HashLimits) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        users = batch.column("user_id").to_numpy()
        pairs = batch.column("pairs").to_numpy()
        size, listpack = memory.user_estimates(
            users, pairs, batch.column("lp").to_numpy(), batch.column("ht").to_numpy(),
            value_bytes, key_head, limits)
        yield pa.RecordBatch.from_arrays(
            [pa.array(_slots(users)), pa.array(np.ones(len(users), np.int64)), pa.array(pairs),
             pa.array(listpack.astype(np.int64)), pa.array(size)],
            names=["slot", "users", "pairs", "listpack_users", "bytes"])


def _slots(users: np.ndarray) -> np.ndarray:
    """(u,) int32 Redis Cluster slot of each user's keys (the decimal id is the hash tag)."""
    return user_slots(users).astype(np.int32)


def bytes_per_slot(users, value_bytes: int, key_head: int, limits: memory.HashLimits) -> list:
    """Estimated Redis bytes of the version per cluster slot from per-user rows (user_id,
    pairs, lp, ht): rows of (slot, users, pairs, listpack_users, bytes), at most 16384."""
    from pyspark.sql import functions as F

    slots = users.mapInArrow(
        partial(_user_slots, value_bytes=value_bytes, key_head=key_head, limits=limits),
        "slot int, users long, pairs long, listpack_users long, bytes long")
    return (slots.groupBy("slot")
            .agg(*(F.sum(c).alias(c) for c in ("users", "pairs", "listpack_users", "bytes")))
            .collect())


GROUP_KEYS = ("_reason", "model_version", "bytes")
TALLY_DDL = ("_reason string, model_version string, bytes int, slot int, rows long, low long, "
             "xor long, scattered long, users long, listpack_users long, estimate long")


def _group_slots(batches: Iterator[pa.RecordBatch], value_factor: int, key_head: int,
                 limits: memory.HashLimits) -> Iterator[pa.RecordBatch]:
    """Per row of ``validate.user_groups``: its slot, whether it is scattered and, for rows
    without a problem, the bytes of the user's hash if this group were published."""
    for batch in batches:
        column = {name: pc.fill_null(batch.column(name), 0).to_numpy()
                  for name in ("user_id", "bytes", "rows", "lp", "ht", "first", "last")}
        rows, size = column["rows"], column["bytes"]
        clean = pc.is_null(batch.column("_reason")).to_numpy(zero_copy_only=False)
        estimate = np.zeros(len(rows), np.int64)
        listpack = np.zeros(len(rows), np.int64)
        key_length = key_head + memory.decimal_digits(column["user_id"]) + 1
        for width in np.unique(size[clean]).tolist():
            chosen = clean & (size == width)
            value_bytes = width * value_factor
            estimate[chosen] = memory.user_bytes(rows[chosen], column["lp"][chosen],
                                                 column["ht"][chosen], value_bytes,
                                                 key_length[chosen], limits)
            listpack[chosen] = limits.encoding(0, value_bytes) == "listpack"
        listpack &= rows <= limits.max_entries
        scattered = column["last"] - column["first"] + 1 != rows
        yield pa.RecordBatch.from_arrays(
            [batch.column(name) for name in (*GROUP_KEYS,)]
            + [pa.array(_slots(column["user_id"])), batch.column("rows"), batch.column("low"),
               batch.column("xor"), pa.array(scattered.astype(np.int64)),
               pa.array(np.ones(len(rows), np.int64)), pa.array(listpack), pa.array(estimate)],
            names=[*GROUP_KEYS, "slot", "rows", "low", "xor", "scattered", "users",
                   "listpack_users", "estimate"])


def tally(groups, value_factor: int = 1, key_head: int = 0,
          limits: memory.HashLimits | None = None) -> list[dict]:
    """``validate.user_groups`` summed per (row problem, model version, embedding length,
    cluster slot), in one job: rows, digest parts, scattered users, users, listpack-encoded
    users and the estimated Redis bytes (``value_factor``: value bytes per embedding byte,
    1 for fp16 and 2 for fp32; ``key_head``: length of the version's key head). At most
    16384 rows per (problem, version, length); ``validate.survey`` folds them, the memory
    check keeps the published group's."""
    from pyspark.sql import functions as F

    slots = groups.mapInArrow(
        partial(_group_slots, value_factor=value_factor, key_head=key_head,
                limits=limits or memory.HashLimits()), TALLY_DDL)
    sums = [F.sum(c).alias(c) for c in ("rows", "low", "scattered", "users",
                                        "listpack_users", "estimate")]
    return [row.asDict() for row in slots.groupBy(*GROUP_KEYS, "slot")
            .agg(*sums, F.bit_xor("xor").alias("xor")).collect()]


def write(valid, target: WriteTarget, partitions: int, scattered: list[int] | None
          ) -> list[dict]:
    """Write every pair and return each partition's stats row.

    A user's pairs must reach one task as one contiguous run (the writer sorts each run by
    item). Rows of users that the survey found contiguous in one input partition
    (``scattered`` lists the others) keep the input's partitions and order: no shuffle.
    The rows of ``scattered`` users (all rows when it is None) are hash-partitioned by user
    into ``partitions`` and sorted by (user, item), in the same job.
    """
    from pyspark.sql import functions as F

    valid = valid.select("user_id", "item_id", "embedding")
    if scattered is None:
        parts = _by_user(valid, partitions)
    elif not scattered:
        parts = valid
    else:
        moved = F.col("user_id").isin(scattered)
        parts = valid.where(~moved).unionByName(_by_user(valid.where(moved), partitions))
    rows = parts.mapInArrow(partial(write_partition, target=target), STATS_DDL).collect()
    return [row.asDict() for row in rows]


def _by_user(rows, partitions: int):
    return rows.repartition(partitions, "user_id").sortWithinPartitions("user_id", "item_id")
