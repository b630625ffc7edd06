"""Item clusters of the CLUSTER level: k-means over the ALS item factors plus popularity buckets.

Clusters (deterministic for a seed):

* items with an ALS factor (the retrieval stage's ``items`` table): ``faiss.Kmeans`` (seeded)
  over the factors, ``k`` clusters, ids ``0 .. k-1``; the representative is the **medoid**: the
  member nearest to the centroid (ties: the smallest item id).
* items without a factor but seen in the mined ``item_stats`` (new since the ALS run): clusters
  ``k .. k+b-1`` by popularity bucket (quantiles of their row counts); the representative is the
  bucket's median item by popularity (ties: the smallest item id).
* items in neither: no cluster (:data:`~solaris_lib.fallback.levels.NO_CLUSTER`).

A cluster's embedding for a user is the FM's embedding of the user with the cluster's
representative, not the mean of the user's exact embeddings in the cluster: it exists for every
(user, cluster), costs ``users x clusters`` FM pairs and needs no exact embedding in the cluster.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np

from solaris_lib.errors import EmptyInputError
from solaris_lib.fallback.levels import NO_CLUSTER

log = logging.getLogger(__name__)

# written beside the cluster table: the digest of the item -> cluster table it was embedded for
CLUSTERING_MARKER = "_CLUSTERING"


@dataclass(frozen=True)
class ItemClusters:
    """A version's item -> cluster table: ``item_ids`` (n,) strictly increasing int64 ->
    ``cluster_ids`` (n,) int32. Built by :func:`build_item_clusters`, written by the infer job,
    published with the version and held by the client (immutable: lookups share it)."""

    item_ids: np.ndarray
    cluster_ids: np.ndarray

    def of(self, items: np.ndarray) -> np.ndarray:
        """(m,) int64 cluster of each of ``items`` (m,) int64; ``NO_CLUSTER`` for items not in
        the table."""
        if not len(self.item_ids):
            return np.full(len(items), NO_CLUSTER, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.item_ids, items), len(self.item_ids) - 1)
        found = self.item_ids[pos] == items
        return np.where(found, self.cluster_ids[pos], NO_CLUSTER).astype(np.int64)

    def digest(self) -> str:
        """BLAKE2b-64 (16 hex digits) of the item ids (``<i8``) then the cluster ids (``<i4``):
        names one clustering. The cluster table records the one its rows were embedded for
        (:data:`CLUSTERING_MARKER`), so a cluster id never meets another clustering's items."""
        table = (np.asarray(self.item_ids, "<i8").tobytes()
                 + np.asarray(self.cluster_ids, "<i4").tobytes())
        return hashlib.blake2b(table, digest_size=8).hexdigest()

    def fields(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(cluster of each item (n,), distinct clusters (k,) sorted, none negative)``."""
        clusters = self.of(items)
        return clusters, np.unique(clusters[clusters >= 0])


def kmeans_clusters(item_ids: np.ndarray, factors: np.ndarray, k: int, seed: int):
    """(sorted ids (n,), cluster (n,) int32, medoid item per cluster (k',) int64) by seeded
    faiss k-means over ``factors`` (n, rank).

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
                        seed: int) -> tuple[ItemClusters, np.ndarray]:
    """The clusters of every item with a factor (k-means) or seen in ``item_stats``
    (popularity), and each cluster's representative item ((clusters,) int64)."""
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
    return ItemClusters(ids[order], cluster[order]), reps
