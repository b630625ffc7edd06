"""The publisher's hierarchical fallback level (``docs/cache-format.md``).

Inputs, next to an interval's exact embeddings (written by ``solaris_lib.model.fallback``):

* ``embeddings/cluster/interval=KEY``: ``user_id`` int64, ``cluster_id`` int32,
  ``model_version`` string, ``embedding`` binary (``dim`` little-endian fp16): read by Spark
  tasks like the exact rows (:data:`rows.CLUSTER`, :class:`inputs.TableInput`) and written
  into each user's cluster hash ``P:e:<version>:{<user>}:c``;
* ``embeddings/item_clusters/interval=KEY``: ``item_id`` int64, ``cluster_id`` int32: read on
  the driver (:func:`read_item_clusters`) and written as the strings ``P:h:<version>:items:<k>``
  (:func:`format.pack_item_clusters`);
* optionally ``_CLUSTERING`` in the cluster table's folder: the digest of the item table its
  rows were embedded for (:func:`clustering_mismatch`: another digest skips the level);
* optionally ``embeddings/item_prior/interval=KEY``: ``item_id`` int64, ``model_version``
  string, ``embedding`` binary (``dim`` fp16): the FM's embedding of (empty history, item) per
  live item, read on the driver (:func:`read_item_priors`) and written as the strings
  ``P:h:<version>:prior:<k>`` (the ITEM level).

Rows that cannot be served are dropped and counted per reason (``dropped``): cluster rows as
the exact rows are refused (:mod:`rows`; they must have the exact rows' model version and
length); item-table rows with a null or negative id (``bad_item_cluster``), and an item listed
twice keeps its smallest cluster id (``duplicate_item``); priors under ``prior_*`` reasons.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
from solaris_lib.cache.rows import CLUSTER, Survey
from solaris_lib.fallback.clusters import CLUSTERING_MARKER, ItemClusters
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, ITEM_CLUSTERS, ITEM_PRIORS, DataLayout, join
from solaris_lib.storage import exists, filesystem, is_complete, list_files, read_text

log = logging.getLogger(__name__)

ITEM_CLUSTER_COLUMNS = {"item_id": pa.int64(), "cluster_id": pa.int32()}
ITEM_PRIOR_COLUMNS = {"item_id": pa.int64(), "model_version": pa.string(),
                      "embedding": pa.binary()}


@dataclass(frozen=True)
class FallbackTables:
    """An interval's fallback tables, looked at once per publish (:func:`find_tables`).

    ``paths``: folder of the cluster table and of the item -> cluster table; ``complete``:
    whether each holds its success marker; ``prior_path``: folder of the optional ITEM-level
    table (looked at only when the level is read).
    """

    paths: dict[str, str]
    complete: dict[str, bool]
    prior_path: str

    @property
    def present(self) -> bool:
        """True when both tables of the level are complete."""
        return all(self.complete.values())

    def usable(self) -> bool:
        """True when the level is published; a half-present level is logged and skipped."""
        if self.present:
            return True
        if any(self.complete.values()):
            log.warning("fallback level skipped: %s", ", ".join(
                f"{self.paths[n]} is {'complete' if c else 'missing or incomplete'}"
                for n, c in self.complete.items()))
        return False


def find_tables(layout: DataLayout, interval: Interval) -> FallbackTables:
    """Where the interval's fallback tables are and which are complete (one check each)."""
    paths = {name: layout.output(EMBEDDINGS, interval, name)
             for name in (CLUSTER.folder, ITEM_CLUSTERS)}
    return FallbackTables(paths, {name: is_complete(path) for name, path in paths.items()},
                          layout.output(EMBEDDINGS, interval, ITEM_PRIORS))


@dataclass
class ItemTables:
    """The driver's part of the level: ``item_ids`` (n,) sorted int64 and ``cluster_ids`` (n,)
    int32 (the item table); ``prior_ids`` (p,) sorted int64 and ``prior_values`` (p, 2 * dim)
    uint8 fp16 (the ITEM level, empty without it); rows dropped per reason."""

    item_ids: np.ndarray
    cluster_ids: np.ndarray
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

    def digest(self, cluster_rows: Survey) -> str:
        """The level's part of the version id: the cluster rows' digest, then the BLAKE2b-64
        of the item table's packed bytes and (with the ITEM level) of the prior chunks."""
        out = cluster_rows.digest + ItemClusters(self.item_ids, self.cluster_ids).digest()
        priors = b"".join(self.prior_chunks())
        return out + (hashlib.blake2b(priors, digest_size=8).hexdigest() if priors else "")


def _read(folder: str, columns: dict[str, pa.DataType]) -> pa.Table:
    """Every parquet file of ``folder`` (contract columns checked) as one table."""
    fs, _ = filesystem(folder)
    parts = []
    for path in list_files(folder):
        inner = filesystem(path)[1]
        schema = pq.read_schema(inner, filesystem=fs)
        problems = [f"{name} is {schema.field(name).type if name in schema.names else 'missing'}"
                    f", expected {kind}" for name, kind in columns.items()
                    if name not in schema.names or schema.field(name).type != kind]
        if problems:
            raise PublishInputError(f"{path}: {'; '.join(problems)}")
        parts.append(pq.read_table(inner, filesystem=fs, columns=list(columns)))
    return pa.concat_tables(parts) if parts else pa.schema(columns).empty_table()


def read_item_clusters(path: str) -> ItemTables:
    """The item -> cluster table: valid rows sorted by item, each item once (smallest
    cluster)."""
    table = _read(path, ITEM_CLUSTER_COLUMNS)
    ok = pc.and_(pc.fill_null(pc.greater_equal(table["item_id"], 0), False),
                 pc.fill_null(pc.greater_equal(table["cluster_id"], 0), False))
    good = table.filter(ok)
    items = good["item_id"].to_numpy().astype(np.int64)
    clusters = good["cluster_id"].to_numpy().astype(np.int32)
    order = np.lexsort((clusters, items))
    items, clusters = items[order], clusters[order]
    first = np.r_[True, items[1:] != items[:-1]] if len(items) else np.zeros(0, bool)
    dropped = {name: count for name, count in (
        ("bad_item_cluster", table.num_rows - good.num_rows),
        ("duplicate_item", int(len(items) - first.sum()))) if count}
    return ItemTables(items[first], clusters[first], dropped)


def clustering_mismatch(cluster_path: str, items: ItemTables) -> str | None:
    """Why the cluster table at ``cluster_path`` cannot be served beside the item table
    ``items`` (None: it can). The infer job records in the cluster table the digest of the item
    -> cluster table its rows were embedded for (:data:`CLUSTERING_MARKER`); another digest
    means a run replaced one table and not the other, and its cluster ids name other items. A
    table without the record (written by another tool) is served as it is."""
    marker = join(cluster_path, CLUSTERING_MARKER)
    if not exists(marker):
        return None
    recorded = read_text(marker).strip()
    current = ItemClusters(items.item_ids, items.cluster_ids).digest()
    if recorded == current:
        return None
    return (f"{cluster_path} was embedded for the item clusters {recorded}, but the item table "
            f"holds {current} (a run replaced one table and not the other): rerun the "
            "interval's infer task")


def read_item_priors(level: ItemTables, path: str, model_version: str, dim: int) -> None:
    """Add the servable item priors of ``path`` to ``level`` (sorted by item id, each once:
    the smallest bytes of its finite copies), counting the rest under ``prior_*`` reasons."""
    table = _read(path, ITEM_PRIOR_COLUMNS)
    lengths = pc.fill_null(pc.binary_length(table["embedding"]), -1).to_numpy()
    items = pc.fill_null(table["item_id"], -1).to_numpy()
    checks = (("prior_null_item_id", table["item_id"].is_null().to_numpy(zero_copy_only=False)),
              ("prior_negative_item_id", items < 0),
              ("prior_null_embedding", lengths < 0),
              ("prior_wrong_embedding_length", lengths != 2 * dim),
              ("prior_other_model_version", ~pc.fill_null(pc.equal(
                  table["model_version"], model_version), False).to_numpy()))
    bad = np.zeros(table.num_rows, bool)
    for name, hit in checks:
        hit = hit & ~bad
        if hit.any():
            level.dropped[name] = level.dropped.get(name, 0) + int(hit.sum())
        bad |= hit
    good = np.flatnonzero(~bad)
    values = fixed_width_values(table["embedding"].take(good), 2 * dim).copy()
    ids = items[good].astype(np.int64)
    finite = ~non_finite_fp16(values)  # before the copies are compared: a nan copy never wins
    ids, values = ids[finite], values[finite]
    order = sorted(range(len(ids)), key=lambda k: (ids[k], values[k].tobytes()))
    ids, values = ids[order], values[order]
    keep = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, bool)
    for name, count in (("prior_non_finite", int((~finite).sum())),
                        ("prior_duplicate_item", int((~keep).sum()))):
        if count:
            level.dropped[name] = count
    level.prior_ids, level.prior_values = ids[keep], values[keep]


def chunk_bytes(prefix: str, version: str, level: ItemTables) -> list[tuple[str, int]]:
    """(key, estimated Redis bytes) of each item -> cluster chunk and item-prior chunk."""
    keyed = ([(item_clusters_key(prefix, version, k), c) for k, c in enumerate(level.chunks())]
             + [(item_priors_key(prefix, version, k), c)
                for k, c in enumerate(level.prior_chunks())])
    return [(key, string_key_bytes(len(key), len(chunk))) for key, chunk in keyed]


def write_chunks(server, version: str, level: ItemTables, ttl_s: int) -> int:
    """SET every item -> cluster chunk and item-prior chunk with the version's TTL, then read
    each back; returns the chunk count. A chunk that reads back differently raises
    :class:`VerificationError` (the alias is not switched)."""
    keyed = ([(item_clusters_key(server.prefix, version, k), c)
              for k, c in enumerate(level.chunks())]
             + [(item_priors_key(server.prefix, version, k), c)
                for k, c in enumerate(level.prior_chunks())])
    for key, chunk in keyed:
        server.set(key, chunk, ttl_s)
    for key, chunk in keyed:
        if server.get(key) != chunk:
            raise VerificationError(f"version {version}: fallback chunk {key} reads back "
                                    f"differently; the alias was not switched")
    log.info("item -> cluster table: %d items, item priors: %d items; %d chunk(s) written and "
             "read back", len(level.item_ids), len(level.prior_ids), len(keyed))
    return len(keyed)
