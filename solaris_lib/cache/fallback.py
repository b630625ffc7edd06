"""The publisher's hierarchical fallback level (``docs/cache-format.md``, issue 7).

Inputs, next to an interval's exact embeddings (written by ``solaris_lib.transfer``):

* ``embeddings/cluster/interval=KEY``: ``user_id`` int64, ``cluster_id`` int32,
  ``model_version`` string, ``embedding`` binary (``dim`` little-endian fp16);
* ``embeddings/item_clusters/interval=KEY``: ``item_id`` int64, ``cluster_id`` int32.

When both are complete the version also gets every valid (user, cluster) row as the field
``c<cluster_id>`` of the user's hash (written by the same Spark job as the exact pairs, as item
ids ``-1 - cluster_id``: :func:`pairs.cluster_rows_item`) and the item -> cluster table as the
strings ``P:h:<version>:items:<k>`` (:func:`format.pack_item_clusters`), written and read back
by the driver. Cluster rows that cannot be served (null or negative ids, no embedding, another
length than the exact embeddings', another model version) are dropped and counted per reason;
an item listed twice keeps its smallest cluster id (counted as ``duplicate_item``).

The ITEM level rides along when the interval also has (complete)
``embeddings/item_prior/interval=KEY``: ``item_id`` int64, ``model_version`` string,
``embedding`` binary (``dim`` fp16): the FM's embedding of (empty history, item) per live item.
It is collected to the driver (items x ``2 * dim`` bytes), packed into the strings
``P:h:<version>:prior:<k>`` (:func:`format.pack_item_priors`, always fp16: the client holds it
in memory) and written and read back with the item -> cluster chunks. Rows that cannot be
served (null or negative item, wrong length, other model version, inf/nan, a duplicate item)
are dropped and counted under ``prior_*`` reasons in ``dropped``.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np

from solaris_lib.cache.errors import PublishInputError, VerificationError
from solaris_lib.cache.format import (
    ITEM_CLUSTER_CHUNK,
    ITEM_PRIOR_CHUNK,
    item_clusters_key,
    item_priors_key,
    pack_item_clusters,
    pack_item_priors,
)
from solaris_lib.cache.memory import string_key_bytes
from solaris_lib.cache.pairs import fixed_width_values, non_finite_fp16
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import is_complete

log = logging.getLogger(__name__)

CLUSTER_TABLE = "cluster"
ITEM_CLUSTERS_TABLE = "item_clusters"
ITEM_PRIOR_TABLE = "item_prior"
CLUSTER_COLUMNS = {"user_id": "bigint", "cluster_id": "int", "model_version": "string",
                   "embedding": "binary"}
ITEM_CLUSTER_COLUMNS = {"item_id": "bigint", "cluster_id": "int"}
ITEM_PRIOR_COLUMNS = {"item_id": "bigint", "model_version": "string", "embedding": "binary"}
_MASK32, _MASK64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


@dataclass
class FallbackLevel:
    """The fallback level of one publish.

    ``rows``: Spark frame (user_id, item_id = ``-1 - cluster_id``, embedding) of the valid
    cluster rows; ``users``: frame (user_id, pairs, lp, ht) of them per user, for the memory
    estimate; ``item_ids`` (n,) sorted int64 and ``cluster_ids`` (n,) int32: the item table;
    ``prior_ids`` (p,) sorted int64 and ``prior_values`` (p, 2 * dim) uint8 fp16: the ITEM level
    (empty without it).
    """

    rows: object
    users: object
    valid_rows: int
    item_ids: np.ndarray
    cluster_ids: np.ndarray
    digest: str
    dropped: dict[str, int] = field(default_factory=dict)
    prior_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    prior_values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.uint8))

    @property
    def clusters(self) -> int:
        """Distinct cluster ids of the item table."""
        return int(len(np.unique(self.cluster_ids)))

    def chunks(self) -> list[bytes]:
        return pack_item_clusters(self.item_ids, self.cluster_ids, ITEM_CLUSTER_CHUNK)

    def prior_chunks(self) -> list[bytes]:
        """The ``P:h:<version>:prior:<k>`` values; none without the ITEM level."""
        if not len(self.prior_ids):
            return []
        return pack_item_priors(self.prior_ids, self.prior_values, ITEM_PRIOR_CHUNK)

    def prior_fields(self) -> dict[str, int]:
        """The manifest's ITEM-level fields (zeros, i.e. absent, without the level)."""
        return {"item_priors": int(len(self.prior_ids)),
                "item_prior_chunks": len(self.prior_chunks())}


@dataclass(frozen=True)
class FallbackTables:
    """An interval's fallback tables, looked at once per publish (:func:`find_tables`): the
    read path and :func:`read_fallback` act on the same answer.

    ``paths``: folder of the cluster table and of the item -> cluster table; ``complete``:
    whether each holds its success marker; ``prior_path``: folder of the optional ITEM-level
    table (looked at only when the level is read).
    """

    paths: dict[str, str]
    complete: dict[str, bool]
    prior_path: str

    @property
    def present(self) -> bool:
        """True when both tables of the level are complete (:func:`read_fallback` reads them)."""
        return all(self.complete.values())


def find_tables(layout: DataLayout, interval: Interval) -> FallbackTables:
    """Where the interval's fallback tables are and which are complete (one check each)."""
    paths = {name: layout.output(EMBEDDINGS, interval, name)
             for name in (CLUSTER_TABLE, ITEM_CLUSTERS_TABLE)}
    return FallbackTables(paths, {name: is_complete(path) for name, path in paths.items()},
                          layout.output(EMBEDDINGS, interval, ITEM_PRIOR_TABLE))


def read_fallback(spark, tables: FallbackTables, model_version: str,
                  dim: int) -> FallbackLevel | None:
    """The fallback level of ``tables``, or None when neither table is complete, when only
    one is (logged, naming the missing or incomplete one) or when they hold nothing servable
    (logged). Wrong columns raise :class:`PublishInputError`."""
    if not any(tables.complete.values()):
        return None
    if not tables.present:
        log.warning("fallback level skipped: %s", ", ".join(
            f"{tables.paths[n]} is {'complete' if c else 'missing or incomplete'}"
            for n, c in tables.complete.items()))
        return None
    rows = _read(spark, tables.paths[CLUSTER_TABLE], CLUSTER_COLUMNS)
    items = _read(spark, tables.paths[ITEM_CLUSTERS_TABLE], ITEM_CLUSTER_COLUMNS)
    level = _level(rows, items, model_version, dim)
    if is_complete(tables.prior_path):
        _add_priors(level, _read(spark, tables.prior_path, ITEM_PRIOR_COLUMNS), model_version,
                    dim)
    if not level.valid_rows or not len(level.item_ids):
        log.warning("fallback level skipped: %d servable cluster rows, %d items with a cluster "
                    "(dropped: %s)", level.valid_rows, len(level.item_ids), level.dropped)
        return None
    log.info("fallback level: %d cluster rows, %d items in %d clusters, %d item priors "
             "(dropped: %s)", level.valid_rows, len(level.item_ids), level.clusters,
             len(level.prior_ids), level.dropped)
    return level


def _read(spark, path: str, columns: dict[str, str]):
    frame = spark.read.parquet(path)
    types = dict(frame.dtypes)
    problems = [f"{name} is {types.get(name, 'missing')}, expected {kind}"
                for name, kind in columns.items() if types.get(name) != kind]
    if problems:
        raise PublishInputError(f"{path}: {'; '.join(problems)}")
    return frame.select(*columns)


def cluster_reason(model_version: str, dim: int):
    """Column: why a cluster row is not served (null: it is)."""
    from pyspark.sql import functions as F

    return (F.when(F.col("user_id").isNull(), "null_user_id")
            .when(F.col("user_id") < 0, "negative_user_id")
            .when(F.col("cluster_id").isNull(), "null_cluster_id")
            .when(F.col("cluster_id") < 0, "negative_cluster_id")
            .when(F.col("embedding").isNull(), "null_embedding")
            .when(F.length("embedding") != 2 * dim, "wrong_embedding_length")
            .when(F.col("model_version").isNull()
                  | (F.col("model_version") != model_version), "other_model_version"))


def _level(rows, items, model_version: str, dim: int) -> FallbackLevel:
    from pyspark.sql import functions as F

    from solaris_lib.cache.frames import cluster_field_sizes

    why = cluster_reason(model_version, dim)
    row_hash = F.xxhash64("user_id", "cluster_id", "embedding")
    groups = (rows.select(why.alias("reason"), row_hash.alias("h"))
              .groupBy("reason")
              .agg(F.count("*").alias("rows"),
                   F.sum(F.col("h").bitwiseAND(F.lit(_MASK32))).alias("low"),
                   F.bit_xor("h").alias("xor"))
              .collect())
    dropped = {g["reason"]: g["rows"] for g in groups if g["reason"] is not None}
    valid = next((g for g in groups if g["reason"] is None), None)
    valid_rows = valid["rows"] if valid else 0
    low = (valid["low"] or 0) & _MASK64 if valid else 0
    xor = (valid["xor"] or 0) & _MASK64 if valid else 0
    good = rows.where(why.isNull())
    item_ids, cluster_ids, duplicates = _item_table(items)
    if duplicates:
        dropped["duplicate_item"] = duplicates
    table = hashlib.blake2b(item_ids.astype("<i8").tobytes() + cluster_ids.astype("<i4")
                            .tobytes(), digest_size=8).hexdigest()
    users = (good.select("user_id", *cluster_field_sizes())
             .groupBy("user_id")
             .agg(F.count("*").alias("pairs"), F.sum("lp").alias("lp"), F.sum("ht").alias("ht")))
    writer_rows = good.select("user_id", (F.lit(-1).cast("long") - F.col("cluster_id"))
                              .alias("item_id"), "embedding")
    return FallbackLevel(writer_rows, users, valid_rows, item_ids, cluster_ids,
                         f"{low:016x}{xor:016x}{table}", dropped)


def _item_table(items) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted unique item ids, their cluster, duplicates dropped) of the valid item rows."""
    from pyspark.sql import functions as F

    ok = (F.col("item_id").isNotNull() & (F.col("item_id") >= 0)
          & F.col("cluster_id").isNotNull() & (F.col("cluster_id") >= 0))
    table = items.where(ok).orderBy("item_id", "cluster_id").toArrow()
    ids = table.column("item_id").to_numpy().astype(np.int64)
    clusters = table.column("cluster_id").to_numpy().astype(np.int32)
    first = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, dtype=bool)
    return ids[first], clusters[first], int(len(ids) - first.sum())


def _add_priors(level: FallbackLevel, priors, model_version: str, dim: int) -> None:
    """Collect the servable item priors into ``level`` (sorted by item id), counting the rest."""
    from pyspark.sql import functions as F

    why = (F.when(F.col("item_id").isNull(), "prior_null_item_id")
           .when(F.col("item_id") < 0, "prior_negative_item_id")
           .when(F.col("embedding").isNull(), "prior_null_embedding")
           .when(F.length("embedding") != 2 * dim, "prior_wrong_embedding_length")
           .when(F.col("model_version").isNull()
                 | (F.col("model_version") != model_version), "prior_other_model_version"))
    tagged = priors.withColumn("reason", why)
    for row in tagged.where(F.col("reason").isNotNull()).groupBy("reason").count().collect():
        level.dropped[row["reason"]] = row["count"]
    table = (tagged.where(F.col("reason").isNull()).select("item_id", "embedding")
             .orderBy("item_id", "embedding").toArrow())
    ids = table.column("item_id").to_numpy().astype(np.int64)
    values = fixed_width_values(table.column("embedding"), 2 * dim).copy()
    keep = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, bool)
    finite = ~non_finite_fp16(values)
    for name, bad in (("prior_duplicate_item", ~keep), ("prior_non_finite", keep & ~finite)):
        if bad.any():
            level.dropped[name] = int(bad.sum())
    level.prior_ids, level.prior_values = ids[keep & finite], values[keep & finite]
    packed = b"".join(level.prior_chunks())
    level.digest += hashlib.blake2b(packed, digest_size=8).hexdigest() if packed else ""


def chunk_bytes(prefix: str, version: str, level: FallbackLevel) -> list[tuple[str, int]]:
    """(key, estimated Redis bytes) of each item -> cluster chunk and item-prior chunk."""
    out = []
    for index, chunk in enumerate(level.chunks()):
        key = item_clusters_key(prefix, version, index)
        out.append((key, string_key_bytes(len(key), len(chunk))))
    for index, chunk in enumerate(level.prior_chunks()):
        key = item_priors_key(prefix, version, index)
        out.append((key, string_key_bytes(len(key), len(chunk))))
    return out


def write_item_clusters(server, version: str, level: FallbackLevel, ttl_s: int) -> int:
    """SET every item -> cluster chunk and item-prior chunk with the version's TTL, then read
    each back; returns the chunk count.

    A chunk that reads back differently raises :class:`VerificationError` (the alias is not
    switched)."""
    keyed = ([(item_clusters_key(server.prefix, version, k), c)
              for k, c in enumerate(level.chunks())]
             + [(item_priors_key(server.prefix, version, k), c)
                for k, c in enumerate(level.prior_chunks())])
    for key, chunk in keyed:
        server.command(key, "SET", key, chunk, "EX", ttl_s)
    for key, chunk in keyed:
        if server.command(key, "GET", key) != chunk:
            raise VerificationError(f"version {version}: fallback chunk {key} reads back "
                                    f"differently; the alias was not switched")
    log.info("item -> cluster table: %d items, item priors: %d items; %d chunk(s) written and "
             "read back", len(level.item_ids), len(level.prior_ids), len(keyed))
    return len(keyed)


def with_cluster_fields(users, cluster_users):
    """Per-user (user_id, pairs, lp, ht) of the exact pairs plus the ``c<cluster>`` fields."""
    from pyspark.sql import functions as F

    return (users.unionByName(cluster_users).groupBy("user_id")
            .agg(*(F.sum(c).alias(c) for c in ("pairs", "lp", "ht"))))
