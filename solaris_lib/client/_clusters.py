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
(level ``ITEM``): no extra field, no extra round trip. Each row's level is
:func:`~solaris_lib.fallback.resolve_levels` of what the version holds for it
(:func:`fallback_levels`), the rule the transfer report applies too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from redis.exceptions import ResponseError

from solaris_lib.cache.errors import CacheFormatError
from solaris_lib.cache.format import (
    ITEM_CLUSTER_CHUNK,
    ITEM_CLUSTER_RECORD,
    ITEM_PRIOR_CHUNK,
    Codec,
    Manifest,
    chunk_count,
    chunk_rows,
    item_clusters_key,
    item_priors_key,
    unpack_item_clusters,
    unpack_item_priors,
)
from solaris_lib.client._transport import Transport
from solaris_lib.fallback import ItemClusters, Level, resolve_levels

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemPriors:
    """``item_ids`` (p,) strictly increasing int64 -> ``embeddings`` (p, dim) float32 (the ITEM
    level; immutable, shared by lookups)."""

    item_ids: np.ndarray
    embeddings: np.ndarray

    def find(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(held (n,) bool: the item of ``items`` (n,) has a prior, row (n,) of that prior in
        ``embeddings``)."""
        if not len(self.item_ids):
            return np.zeros(len(items), bool), np.zeros(len(items), np.int64)
        pos = np.minimum(np.searchsorted(self.item_ids, items), len(self.item_ids) - 1)
        return self.item_ids[pos] == items, pos


PIPELINE_BYTES = 16 << 20  # chunk bytes asked for in one background pipeline


def table_bytes(manifest: Manifest) -> dict[str, int]:
    """Bytes each fallback table of ``manifest`` takes in the client's memory (from the
    manifest's counts, before anything is read): ``cluster`` 12 per item, ``item`` 8 + 4 * dim
    per prior (float32)."""
    out = {}
    if manifest.has_clusters:
        out["cluster"] = manifest.item_clusters * ITEM_CLUSTER_RECORD
    if manifest.has_priors:
        out["item"] = manifest.item_priors * (8 + 4 * manifest.dim)
    return out


def read_chunks(transport: Transport, keys: list[str], sizes: list[int]) -> list[bytes]:
    """Each key's string, which must be exactly ``sizes[k]`` bytes: ``GETRANGE key 0 size``
    (so a longer value is never read whole), in pipelines of about :data:`PIPELINE_BYTES`.
    A missing, shorter or longer value or an error reply raises :class:`CacheFormatError`
    (the level is served without); an I/O failure :class:`CacheError`."""
    chunks: list[bytes] = []
    start = 0
    while start < len(keys):
        stop, total = start, 0
        while stop < len(keys) and (stop == start or total + sizes[stop] <= PIPELINE_BYTES):
            total += sizes[stop]
            stop += 1
        commands = [("GETRANGE", keys[k], 0, sizes[k]) for k in range(start, stop)]
        replies = transport.background(keys[start], commands)
        for k, reply in zip(range(start, stop), replies, strict=True):
            if isinstance(reply, ResponseError) or not isinstance(reply, bytes):
                raise CacheFormatError(f"GETRANGE {keys[k]} answered {reply!r:.200}")
            if len(reply) != sizes[k]:
                raise CacheFormatError(f"{keys[k]} is missing or not {sizes[k]} bytes long")
            chunks.append(reply)
        start = stop
    return chunks


def _chunk_plan(manifest: Manifest, prefix: str, what: str) -> tuple[list[str], list[int], int]:
    """Keys and exact byte sizes of ``what`` table's chunks, and its row count; a chunk count
    other than the format's is a :class:`CacheFormatError`."""
    if what == "cluster":
        items, chunks, per, record = (manifest.item_clusters, manifest.item_cluster_chunks,
                                      ITEM_CLUSTER_CHUNK, ITEM_CLUSTER_RECORD)
        key = item_clusters_key
    else:
        items, chunks, per, record = (manifest.item_priors, manifest.item_prior_chunks,
                                      ITEM_PRIOR_CHUNK, 8 + 2 * manifest.dim)
        key = item_priors_key
    if chunks != chunk_count(items, per):
        raise CacheFormatError(f"{what} table of {items} items must have "
                               f"{chunk_count(items, per)} chunks, the manifest says {chunks}")
    keys = [key(prefix, manifest.version, k) for k in range(chunks)]
    return keys, [chunk_rows(items, per, k) * record for k in range(chunks)], items


def load_item_clusters(transport: Transport, prefix: str, manifest: Manifest) -> ItemClusters:
    """Read and check ``manifest``'s item -> cluster table (see :func:`read_chunks`)."""
    keys, sizes, items = _chunk_plan(manifest, prefix, "cluster")
    item_ids, cluster_ids = unpack_item_clusters(read_chunks(transport, keys, sizes), items)
    log.info("version %s: item -> cluster table of %d items in %d clusters loaded",
             manifest.version, len(item_ids), manifest.clusters)
    item_ids.flags.writeable = cluster_ids.flags.writeable = False  # shared by lookups
    return ItemClusters(item_ids, cluster_ids)


def load_item_priors(transport: Transport, prefix: str, manifest: Manifest
                     ) -> tuple[ItemPriors, int]:
    """Read and decode ``manifest``'s item-prior table (fp16 values of ``manifest.dim``);
    returns it and the number of priors left out for holding an inf or a nan."""
    keys, sizes, items = _chunk_plan(manifest, prefix, "item")
    item_ids, values = unpack_item_priors(read_chunks(transport, keys, sizes), items,
                                          2 * manifest.dim)
    embeddings = np.ascontiguousarray(values).view("<f2").astype(np.float32)
    finite = np.isfinite(embeddings).all(axis=1)
    if not finite.all():
        item_ids, embeddings = item_ids[finite], embeddings[finite]
    log.info("version %s: %d item priors loaded", manifest.version, len(item_ids))
    item_ids.flags.writeable = embeddings.flags.writeable = False
    return ItemPriors(item_ids, embeddings), int(np.count_nonzero(~finite))


def _cluster_values(codec: Codec, hit: np.ndarray, clusters: np.ndarray, distinct: np.ndarray,
                    values: list) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]:
    """What the user's cluster hash holds for the rows without an exact value: ``(held (n,)
    bool, decoded (k, dim) float32, row (n,) of each row's cluster in decoded, corrupt
    values)``; a malformed value is not held. Nothing is decoded when no such row has a
    cluster."""
    wanted = ~hit & (clusters >= 0)
    if not wanted.any():
        return wanted, None, None, 0
    decoded, present, corrupt = codec.decode(values)
    pos = np.minimum(np.searchsorted(distinct, clusters), len(distinct) - 1)
    return wanted & present[pos], decoded, pos, corrupt


def fallback_levels(codec: Codec, embeddings: np.ndarray, hit: np.ndarray, items: np.ndarray,
                    cluster_fields: tuple | None = None, priors: ItemPriors | None = None
                    ) -> tuple[np.ndarray, int, int, int]:
    """Each row's :class:`Level` (:func:`resolve_levels` of what the version holds) and, in
    place, the embeddings (n, dim) of its CLUSTER and ITEM rows.

    ``hit`` (n,): the exact values; ``cluster_fields``: (the items' clusters (n,), the distinct
    clusters asked for (k,), their HMGET replies (k,)), None when the version has no cluster
    level or the lookup did not ask; ``priors``: the ITEM level, None without it. Returns
    ``(level (n,) int8, cluster rows, item rows, corrupt cluster values)``.
    """
    n, hits = len(hit), int(np.count_nonzero(hit))
    cluster = prior = None
    corrupt, cluster_rows = 0, 0
    if cluster_fields is not None and hits < n:
        cluster, decoded, cluster_pos, corrupt = _cluster_values(codec, hit, *cluster_fields)
        cluster_rows = int(np.count_nonzero(cluster))
    if priors is not None and hits + cluster_rows < n:
        prior, prior_pos = priors.find(items)
    level = resolve_levels(hit, cluster, prior)
    item_rows = 0
    if cluster_rows:
        rows = np.flatnonzero(level == Level.CLUSTER)
        embeddings[rows] = decoded[cluster_pos[rows]]
    if prior is not None:
        rows = np.flatnonzero(level == Level.ITEM)
        embeddings[rows] = priors.embeddings[prior_pos[rows]]
        item_rows = len(rows)
    return level, cluster_rows, item_rows, corrupt
