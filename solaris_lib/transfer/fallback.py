"""Hierarchical fallback: one precomputed embedding per (user, item cluster).

When the exact (user, item) pair was not speculated, serving can still use a coarser embedding:
the FM embedding of the user with the *representative* item of the item's cluster.

Clusters (deterministic for a seed):

* items with an ALS factor (the retrieval stage's ``items`` table): ``faiss.Kmeans`` (seeded)
  over the factors, ``k`` clusters, ids ``0 .. k-1``; the representative is the **medoid**: the
  member nearest to the centroid (ties: the smallest item id).
* items without a factor but seen in the mined ``item_stats`` (new since the ALS run): clusters
  ``k .. k+b-1`` by popularity bucket (quantiles of their row counts); the representative is the
  bucket's median item by popularity (ties: the smallest item id).
* items in neither: no cluster (a lookup of such an item is a miss at every level).

Choice (documented, measured by ``solaris report``): the representative's embedding, not the mean
of the user's exact embeddings in the cluster: it exists for every speculated user and cluster,
costs ``users x clusters`` FM pairs, and needs no exact embeddings in the cluster.

The ITEM level (for users the speculation did not cover: new users, users outside the lookback):
per live item (every item of the item -> cluster table), the FM embedding of (empty history,
item), i.e. the item's prior for a user we know nothing about. Small (items x ``dim`` fp16), so
the client holds it in memory and the level costs no network.

Outputs of :func:`infer_cluster_embeddings` (written atomically with ``_SUCCESS``):
``embeddings/cluster/interval=KEY``: ``user_id`` int64, ``cluster_id`` int32, ``model_version``
string, ``embedding`` binary (``dim`` little-endian fp16, as ``docs/cache-format.md``);
``embeddings/item_clusters/interval=KEY``: ``item_id`` int64, ``cluster_id`` int32;
``embeddings/item_prior/interval=KEY``: ``item_id`` int64, ``model_version`` string,
``embedding`` binary. The cache publisher stores a user's cluster embeddings in the user's hash
as fields ``c<cluster_id>`` and the item priors in ``P:h:<version>:prior:<k>`` strings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from solaris_lib.errors import EmptyInputError

log = logging.getLogger(__name__)

CLUSTER_TABLE = "cluster"
ITEM_CLUSTERS_TABLE = "item_clusters"
ITEM_PRIOR_TABLE = "item_prior"
NO_CLUSTER = -1
PRIOR_ITEMS_PER_ROW = 256  # items of one pseudo-user row of the prior inference


@dataclass(frozen=True)
class ItemClusters:
    """``item_ids`` (n,) sorted int64 -> ``cluster_ids`` (n,) int32; cluster ``c`` is represented
    by ``representatives[c]`` (int64 item id). ``factor_clusters``: how many are k-means ones."""

    item_ids: np.ndarray
    cluster_ids: np.ndarray
    representatives: np.ndarray
    factor_clusters: int

    def lookup(self, items: np.ndarray) -> np.ndarray:
        """(m,) int32 cluster of each item; ``NO_CLUSTER`` for unknown items."""
        items = np.asarray(items, np.int64)
        pos = np.clip(np.searchsorted(self.item_ids, items), 0, max(len(self.item_ids) - 1, 0))
        found = (len(self.item_ids) > 0) & (self.item_ids[pos] == items) if len(self.item_ids) \
            else np.zeros(len(items), bool)
        return np.where(found, self.cluster_ids[pos] if len(self.item_ids) else 0,
                        NO_CLUSTER).astype(np.int32)


def kmeans_clusters(item_ids: np.ndarray, factors: np.ndarray, k: int, seed: int):
    """(cluster (n,) int32, medoid item per cluster (k',) int64) by seeded faiss k-means.

    Items are sorted by id first so the result does not depend on input order. ``k`` is lowered
    to the number of items when there are fewer; empty clusters are dropped and renumbered.
    """
    import faiss

    order = np.argsort(item_ids, kind="stable")
    ids = np.asarray(item_ids, np.int64)[order]
    x = np.ascontiguousarray(np.asarray(factors, np.float32)[order])
    k = max(1, min(k, len(ids)))
    km = faiss.Kmeans(x.shape[1], k, niter=25, seed=seed, verbose=False,
                      min_points_per_centroid=1, max_points_per_centroid=1 << 20)
    km.train(x)
    dist, assign = km.index.search(x, 1)
    assign, dist = assign[:, 0], dist[:, 0]
    used = np.unique(assign)
    renumber = np.full(k, -1, np.int64)
    renumber[used] = np.arange(len(used))
    cluster = renumber[assign].astype(np.int32)
    medoids = np.empty(len(used), np.int64)
    for c in range(len(used)):
        members = np.flatnonzero(cluster == c)
        best = members[np.lexsort((ids[members], dist[members]))[0]]
        medoids[c] = ids[best]
    return ids, cluster, medoids


def popularity_clusters(item_ids: np.ndarray, popularity: np.ndarray, buckets: int, offset: int):
    """(sorted ids, cluster (n,) int32 in ``offset..``, representative per used bucket) for items
    without a factor: quantile buckets of ``popularity`` (row counts)."""
    order = np.lexsort((item_ids, popularity))
    ids = np.asarray(item_ids, np.int64)[order]
    bucket = (np.arange(len(ids)) * buckets // max(len(ids), 1)).astype(np.int64)
    used = np.unique(bucket)
    reps = np.array([ids[np.flatnonzero(bucket == b)][(bucket == b).sum() // 2] for b in used],
                    np.int64)
    renumber = np.full(buckets, -1, np.int64)
    renumber[used] = np.arange(len(used))
    cluster = (renumber[bucket] + offset).astype(np.int32)
    back = np.argsort(ids, kind="stable")
    return ids[back], cluster[back], reps


def build_item_clusters(factor_items: np.ndarray, factors: np.ndarray, seen_items: np.ndarray,
                        seen_popularity: np.ndarray, *, k: int, buckets: int,
                        seed: int) -> ItemClusters:
    """Clusters of every item with a factor (k-means) or seen in ``item_stats`` (popularity)."""
    factor_items = np.asarray(factor_items, np.int64)
    if len(factor_items):
        ids, cluster, reps = kmeans_clusters(factor_items, factors, k, seed)
    else:
        ids, cluster, reps = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64)
    rest = ~np.isin(seen_items, factor_items)
    n_factor = len(reps)
    if rest.any():
        p_ids, p_cluster, p_reps = popularity_clusters(
            np.asarray(seen_items, np.int64)[rest], np.asarray(seen_popularity)[rest], buckets,
            n_factor)
        ids, cluster = np.concatenate([ids, p_ids]), np.concatenate([cluster, p_cluster])
        reps = np.concatenate([reps, p_reps])
    if not len(ids):
        raise EmptyInputError("no item factors and no item statistics: nothing to cluster")
    order = np.argsort(ids, kind="stable")
    log.info("item clusters: %d items in %d k-means and %d popularity clusters", len(ids),
             n_factor, len(reps) - n_factor)
    return ItemClusters(ids[order], cluster[order], reps, n_factor)


def cluster_pairs(users: np.ndarray, clusters: ItemClusters) -> tuple[np.ndarray, np.ndarray]:
    """Every (user, cluster) of ``users`` (U,) x all clusters: (user (U*C,), cluster (U*C,))."""
    users = np.unique(np.asarray(users, np.int64))
    n = len(clusters.representatives)
    return np.repeat(users, n), np.tile(np.arange(n, dtype=np.int32), len(users))


def prior_users(items: np.ndarray) -> np.ndarray:
    """(n,) ascending negative pseudo-user ids, one per ``PRIOR_ITEMS_PER_ROW`` items: ids that
    no history has, so the FM embeds each item with an empty history."""
    rows = np.arange(len(items)) // PRIOR_ITEMS_PER_ROW
    return (rows - (rows[-1] + 1 if len(rows) else 0)).astype(np.int64)


def _priors_on_driver(embedder, items: np.ndarray, asof_us: int):
    """Arrow table (item_id, model_version, embedding) of every item's prior, in this process."""
    import pyarrow as pa

    from solaris_lib.cache.pairs import binary_column
    from solaris_lib.model.examples import EventLists
    from solaris_lib.transfer.features import embed_pairs

    items = np.asarray(items, np.int64)
    emb = embed_pairs(embedder, EventLists.empty(), prior_users(items), items, asof_us)
    return pa.table({"item_id": pa.array(items, pa.int64()),
                     "model_version": pa.array([embedder.version] * len(items), pa.string()),
                     "embedding": binary_column(emb.astype("<f2"))})


def _priors_with_spark(spark, folder: str, version: str, hist_path: str, items: np.ndarray,
                       asof_us: int, batch_users: int, threads: int):
    """DataFrame (item_id, model_version, embedding) by the batch-inference UDF: pseudo-users
    without a history row (the left join gives them the empty history)."""
    from pyspark.sql import functions as F

    from solaris_lib.model.inference import OUTPUT_DDL, EmbedBatches

    users = prior_users(items)
    cuts = np.flatnonzero(np.diff(users)) + 1
    rows = [(int(part_users[0]), part_items.tolist())
            for part_users, part_items in zip(np.split(users, cuts), np.split(items, cuts),
                                              strict=True) if len(part_users)]
    pseudo = spark.createDataFrame(rows, "user_id long, item_ids array<bigint>")
    hist = spark.read.parquet(hist_path).select(
        "user_id", F.col("item_ids").alias("h_items"), F.col("ts").alias("h_ts"),
        F.col("clicked").alias("h_clicked"))
    grouped = pseudo.join(hist, "user_id", "left")
    out = grouped.mapInArrow(EmbedBatches(folder, version, asof_us, batch_users, threads),
                             OUTPUT_DDL).filter(F.col("finite"))
    return out.select("item_id", "model_version", "embedding")


def _item_clusters_of(spark, layout, interval, k: int, buckets: int, seed: int) -> ItemClusters:
    """Clusters from the newest retrieval factors <= ``interval`` and its mined item_stats."""
    from solaris_lib.layout import MINED
    from solaris_lib.speculation.io import read_partition
    from solaris_lib.speculation.pipeline import load_factors

    _, item_factors = load_factors(spark, layout, interval)
    if item_factors is not None:
        f = item_factors.orderBy("item_id").toArrow()
        f_items = f.column("item_id").to_numpy()
        vectors = (np.stack(f.column("factor").to_numpy(zero_copy_only=False)) if len(f_items)
                   else np.zeros((0, 1), np.float32))
    else:
        f_items, vectors = np.zeros(0, np.int64), np.zeros((0, 1), np.float32)
    stats = read_partition(spark, layout.output(MINED, interval, "item_stats"))
    stats = stats.select("item_id", "popularity").orderBy("item_id").toArrow()
    return build_item_clusters(f_items, vectors, stats.column("item_id").to_numpy(),
                               stats.column("popularity").to_numpy(), k=k, buckets=buckets,
                               seed=seed)


def _embed_on_driver(spark, embedder, hist_path: str, users: np.ndarray, clusters: ItemClusters,
                     asof_us: int):
    """Arrow table (user_id, cluster_id, model_version, embedding) computed in this process."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from solaris_lib.cache.pairs import binary_column
    from solaris_lib.model.examples import EventLists
    from solaris_lib.transfer.features import embed_pairs

    history = spark.read.parquet(hist_path).filter(
        F.col("user_id").isin(
            [int(u) for u in users])).toArrow()
    events = EventLists.from_user_history(history)
    pair_users, pair_clusters = cluster_pairs(users, clusters)
    emb = embed_pairs(embedder, events, pair_users, clusters.representatives[pair_clusters],
                      asof_us)
    return pa.table({"user_id": pa.array(pair_users, pa.int64()),
                     "cluster_id": pa.array(pair_clusters, pa.int32()),
                     "model_version": pa.array([embedder.version] * len(pair_users), pa.string()),
                     "embedding": binary_column(emb.astype("<f2"))})


def _embed_with_spark(spark, folder: str, version: str, hist_path: str, users_df,
                      clusters: ItemClusters, asof_us: int, batch_users: int, threads: int):
    """DataFrame (user_id, cluster_id, model_version, embedding) by the batch-inference UDF."""
    from pyspark.sql import functions as F

    from solaris_lib.model.inference import OUTPUT_DDL, EmbedBatches

    reps = [int(r) for r in clusters.representatives]
    rep_df = spark.createDataFrame([(int(r), c) for c, r in enumerate(reps)],
                                   "item_id long, cluster_id int")
    hist = spark.read.parquet(hist_path).select(
        "user_id", F.col("item_ids").alias("h_items"), F.col("ts").alias("h_ts"),
        F.col("clicked").alias("h_clicked"))
    grouped = users_df.select("user_id", F.array(*[F.lit(r) for r in reps]).cast(
        "array<bigint>").alias("item_ids")).join(hist, "user_id", "left")
    out = grouped.mapInArrow(EmbedBatches(folder, version, asof_us, batch_users, threads),
                             OUTPUT_DDL).filter(F.col("finite"))
    return out.join(F.broadcast(rep_df), "item_id").select(
        "user_id", "cluster_id", "model_version", "embedding")


def infer_cluster_embeddings(spark, settings, interval, embedder_or_version=None, *, k: int = 32,
                             buckets: int = 4, seed: int = 7, batch_users: int = 256,
                             threads: int = 1, priors: bool = True) -> dict:
    """Write ``embeddings/item_clusters/interval=KEY`` and ``embeddings/cluster/interval=KEY``.

    Inputs (complete partitions of ``interval``): ``speculated`` (the users to cover),
    ``mined/user_history`` and ``mined/item_stats``, and the newest retrieval factors <= it.
    ``embedder_or_version``: a :class:`~solaris_lib.model.online.FoundationEmbedder` (computed
    in the driver), or a model version string / None for the serving version (computed on the
    executors by the batch-inference UDF). Embeddings are as of ``interval.end``, like the exact
    ones. With ``priors`` it also writes ``embeddings/item_prior/interval=KEY``: every clustered
    item's prior (the ITEM level). Returns counts: ``users``, ``clusters``, ``items``,
    ``rows_written``, ``item_priors``, ``model_version``.
    """
    from solaris_lib.layout import EMBEDDINGS, MINED, SPECULATED, DataLayout
    from solaris_lib.model import artefact
    from solaris_lib.speculation.io import read_partition, write_partition

    layout = DataLayout.from_settings(settings)
    users_df = read_partition(spark, layout.output(SPECULATED, interval)).select(
        "user_id").distinct().orderBy("user_id")
    hist_path = layout.output(MINED, interval, "user_history")
    read_partition(spark, hist_path)  # fails clearly when missing
    clusters = _item_clusters_of(spark, layout, interval, k, buckets, seed)
    asof_us = int(interval.end.timestamp() * 1_000_000)
    items_df = spark.createDataFrame(
        [(int(i), int(c)) for i, c in zip(clusters.item_ids, clusters.cluster_ids, strict=True)],
        "item_id long, cluster_id int")
    n_items = write_partition(items_df, layout.output(EMBEDDINGS, interval, ITEM_CLUSTERS_TABLE),
                              ["item_id"])
    if embedder_or_version is None or isinstance(embedder_or_version, str):
        folder, version = artefact.resolve(layout.model("foundation"), embedder_or_version)
        out = _embed_with_spark(spark, folder, version, hist_path, users_df, clusters, asof_us,
                                batch_users, threads)
        prior = (_priors_with_spark(spark, folder, version, hist_path, clusters.item_ids,
                                    asof_us, batch_users, threads) if priors else None)
    else:
        users = users_df.toArrow().column("user_id").to_numpy()
        version = embedder_or_version.version
        out = spark.createDataFrame(_embed_on_driver(spark, embedder_or_version, hist_path,
                                                     users, clusters, asof_us).to_pandas())
        prior = (spark.createDataFrame(_priors_on_driver(embedder_or_version, clusters.item_ids,
                                                         asof_us).to_pandas()) if priors else None)
    rows = write_partition(out, layout.output(EMBEDDINGS, interval, CLUSTER_TABLE),
                           ["user_id", "cluster_id"])
    n_priors = (write_partition(prior, layout.output(EMBEDDINGS, interval, ITEM_PRIOR_TABLE),
                                ["item_id"]) if prior is not None else 0)
    report = {"users": int(users_df.count()), "clusters": len(clusters.representatives),
              "items": n_items, "rows_written": rows, "item_priors": n_priors,
              "model_version": version}
    log.info("cluster embeddings of %s: %s", interval.key, report)
    return report


def embed_fallback_level(spark, settings, interval, model_version: str) -> dict | None:
    """The hierarchical fallback's (user, item cluster) embeddings, same model version.

    The level is optional: without the mined item statistics it needs (the job run on its own,
    outside the pipeline) it is skipped with a warning and the exact embeddings stand alone."""
    if settings.fallback_clusters == 0:
        return None
    from solaris_lib.layout import MINED, DataLayout
    from solaris_lib.storage import is_complete

    stats = DataLayout.from_settings(settings).output(MINED, interval, "item_stats")
    if not is_complete(stats):
        logging.getLogger(__name__).warning("hierarchical fallback skipped: no complete %s", stats)
        return {"skipped": f"no complete {stats}"}

    return infer_cluster_embeddings(spark, settings, interval, model_version,
                                    k=settings.fallback_clusters)
