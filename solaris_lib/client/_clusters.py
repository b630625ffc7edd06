"""The hierarchical fallback level on the client side: the served version's item -> cluster
table (loaded by the background thread) and the merge of cluster values into a lookup.

A version whose manifest has ``fallback`` = ``cluster`` holds, besides the users' exact
bucket hashes, a cluster hash per user (``P:e:<version>:{<user>}:c``, one field per item
cluster) and its item -> cluster table in ``P:h:<version>:items:<k>``
(``docs/cache-format.md``). A lookup's pipeline then also asks the user's cluster hash for the
distinct clusters of the items; a row without an exact value takes its cluster's value (level
``CLUSTER``) when there is one.

A version whose manifest also has ``item_priors`` > 0 holds the ITEM level: the FM's embedding
of (empty history, item) per live item in ``P:h:<version>:prior:<k>``, loaded with the table and
held in memory; a row that is still a miss after the cluster merge takes its item's prior
(level ``ITEM``): no extra field, no extra round trip.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from redis.exceptions import ResponseError

from solaris_lib.cache.errors import CacheProtocolError
from solaris_lib.cache.format import (
    Codec,
    Level,
    Manifest,
    item_clusters_key,
    item_priors_key,
    unpack_item_clusters,
    unpack_item_priors,
)
from solaris_lib.client._transport import Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemClusters:
    """``item_ids`` (n,) strictly increasing int64 -> ``cluster_ids`` (n,) int32 (immutable)."""

    item_ids: np.ndarray
    cluster_ids: np.ndarray

    def of(self, items: np.ndarray) -> np.ndarray:
        """(m,) int64 cluster of each of ``items`` (m,) int64; -1 for items not in the table."""
        if not len(self.item_ids):
            return np.full(len(items), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.item_ids, items), len(self.item_ids) - 1)
        found = self.item_ids[pos] == items
        return np.where(found, self.cluster_ids[pos], -1).astype(np.int64)

    def fields(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(cluster of each item (n,), distinct clusters (k,) sorted)``."""
        clusters = self.of(items)
        return clusters, np.unique(clusters[clusters >= 0])


@dataclass(frozen=True)
class ItemPriors:
    """``item_ids`` (p,) strictly increasing int64 -> ``embeddings`` (p, dim) float32 (the ITEM
    level; immutable, shared by lookups)."""

    item_ids: np.ndarray
    embeddings: np.ndarray

    def fill(self, items: np.ndarray, embeddings: np.ndarray, level: np.ndarray) -> int:
        """Give every ``MISS`` row of ``level`` (n,) whose item has a prior that prior, in
        ``embeddings`` (n, dim), with level ``ITEM``, in place; returns the rows filled."""
        rows = np.flatnonzero(level == Level.MISS)
        if not len(rows) or not len(self.item_ids):
            return 0
        pos = np.minimum(np.searchsorted(self.item_ids, items[rows]), len(self.item_ids) - 1)
        found = self.item_ids[pos] == items[rows]
        rows, pos = rows[found], pos[found]
        embeddings[rows] = self.embeddings[pos]
        level[rows] = Level.ITEM
        return len(rows)


def get_chunks(transport: Transport, keys: list[str]) -> list[bytes | None]:
    """GET each key (in order, each within the background timeout); an error reply raises
    :class:`CacheProtocolError`, an I/O failure :class:`CacheError`."""
    chunks = []
    for key in keys:
        reply = transport.background(key, [("GET", key)])[0]
        if isinstance(reply, ResponseError):
            raise CacheProtocolError(f"GET {key} answered {reply}")
        chunks.append(reply)
    return chunks


def load_item_clusters(transport: Transport, prefix: str, manifest: Manifest) -> ItemClusters:
    """GET every chunk of ``manifest``'s table. An I/O failure raises :class:`CacheError`; a
    missing or malformed table :class:`CacheFormatError`."""
    keys = [item_clusters_key(prefix, manifest.version, k)
            for k in range(manifest.item_cluster_chunks)]
    item_ids, cluster_ids = unpack_item_clusters(get_chunks(transport, keys),
                                                 manifest.item_clusters)
    log.info("version %s: item -> cluster table of %d items in %d clusters loaded",
             manifest.version, len(item_ids), manifest.clusters)
    item_ids.flags.writeable = cluster_ids.flags.writeable = False  # shared by lookups
    return ItemClusters(item_ids, cluster_ids)


def load_item_priors(transport: Transport, prefix: str, manifest: Manifest) -> ItemPriors:
    """GET every chunk of ``manifest``'s item-prior table and decode it (fp16 values of
    ``manifest.dim``). An I/O failure raises :class:`CacheError`; a missing or malformed
    table :class:`CacheFormatError`."""
    keys = [item_priors_key(prefix, manifest.version, k)
            for k in range(manifest.item_prior_chunks)]
    item_ids, values = unpack_item_priors(get_chunks(transport, keys),
                                          manifest.item_priors, 2 * manifest.dim)
    embeddings = np.ascontiguousarray(values).view("<f2").astype(np.float32)
    log.info("version %s: %d item priors loaded", manifest.version, len(item_ids))
    item_ids.flags.writeable = embeddings.flags.writeable = False
    return ItemPriors(item_ids, embeddings)


def merge_clusters(codec: Codec, embeddings: np.ndarray, hit: np.ndarray, clusters: np.ndarray,
                   distinct: np.ndarray, values: list) -> tuple[np.ndarray, int, int]:
    """Fill the exact misses whose cluster has a value, in place.

    ``embeddings`` (n, dim) float32 and ``hit`` (n,) of the exact fields; ``clusters`` (n,) the
    items' clusters (-1: none); ``distinct`` (k,) and ``values`` (k,) the HMGET replies of the
    cluster fields. Returns ``(level (n,) int8, cluster rows, corrupt cluster values)``; a
    malformed cluster value is a miss.
    """
    level = hit.astype(np.int8)
    wanted = ~hit & (clusters >= 0)
    if not wanted.any():
        return level, 0, 0
    decoded, present, corrupt = codec.decode(values)
    rows = np.flatnonzero(wanted)
    pos = np.searchsorted(distinct, clusters[rows])
    got = present[pos]
    rows, pos = rows[got], pos[got]
    embeddings[rows] = decoded[pos]
    level[rows] = Level.CLUSTER
    return level, len(rows), corrupt
