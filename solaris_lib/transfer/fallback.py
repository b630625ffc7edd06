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

Outputs of :func:`infer_cluster_embeddings` (written atomically with ``_SUCCESS``):
``embeddings/cluster/interval=KEY``: ``user_id`` int64, ``cluster_id`` int32, ``model_version``
string, ``embedding`` binary (``dim`` little-endian fp16, as ``docs/cache-format.md``);
``embeddings/item_clusters/interval=KEY``: ``item_id`` int64, ``cluster_id`` int32. The cache
publisher stores a user's cluster embeddings in the user's hash as fields ``c<cluster_id>``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from solaris_lib.errors import EmptyInputError

log = logging.getLogger(__name__)

CLUSTER_TABLE = "cluster"
ITEM_CLUSTERS_TABLE = "item_clusters"
NO_CLUSTER = -1


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
