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

from solaris_lib.cache import memory
from solaris_lib.cache.nodes import key_slot
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
        key_length = key_head + memory.decimal_digits(users) + 1
        size = memory.user_bytes(pairs, batch.column("lp").to_numpy(),
                                 batch.column("ht").to_numpy(), value_bytes, key_length, limits)
        slots = np.fromiter((key_slot(str(u).encode()) for u in users.tolist()), np.int32,
                            len(users))
        listpack = (pairs <= limits.max_entries) & (value_bytes <= limits.max_value)
        yield pa.RecordBatch.from_arrays(
            [pa.array(slots), pa.array(np.ones(len(users), np.int64)), pa.array(pairs),
             pa.array(listpack.astype(np.int64)), pa.array(size)],
            names=["slot", "users", "pairs", "listpack_users", "bytes"])


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
