"""What serving would have had: each interval's cache, made by the pipeline's own stages.

For the served interval ``t = [s, s + L)`` the cache is what the precompute run of
``t - 1 = [s - L, s)`` published. :meth:`Replay.serve` runs that run's production stage functions
in the experiment's SparkSession, under a scratch data root whose ``logs/`` is the experiment's
logs, as the precompute DAG runs them:

1. ``mine`` (:func:`~solaris_lib.speculation.pipeline.run_mine`) of ``t - 1`` (and of ``t - 2``
   before the first run, for the learned scorer's labelled interval);
2. ``speculate`` (:func:`~solaris_lib.speculation.pipeline.run_speculate`): the scorer trained
   on the previous interval (candidates as of ``s - L``, labels from ``[s - L, s)``);
3. ``infer``: :func:`~solaris_lib.model.fallback.embed_interval` with the experiment's FM
   written as a model version (the exact embeddings, then the cluster, item -> cluster and
   item-prior tables), the stage ``jobs/infer_embeddings.py`` runs.

``retrieval`` (:func:`~solaris_lib.speculation.pipeline.run_retrieval`) runs once, for the
interval before the first run; every later run reads those factors (the newest fitted on logs
up to its interval's end), as with a retrieval job that runs less often than speculation (one ALS and one
choice-model fit per experiment keep the report fast).

No stage of the run for ``t - 1`` reads logs at or after ``s``, and every embedding is as of
``s``. The tables the infer stage wrote are the :class:`ServedCache`: a looked-up row's level is
:func:`~solaris_lib.fallback.levels.resolve_levels` (the client's own rule) of what the tables
hold for it, and its embedding the level's fp16 value, as published.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from solaris_lib.cache.pairs import fixed_width_values
from solaris_lib.config import load_settings
from solaris_lib.fallback import ItemClusters, Level, resolve_levels
from solaris_lib.intervals import Interval
from solaris_lib.layout import (
    CLUSTER_EMBEDDINGS,
    EMBEDDINGS,
    ITEM_CLUSTERS,
    ITEM_PRIORS,
    DataLayout,
    join,
)
from solaris_lib.model import artefact
from solaris_lib.model.fallback import embed_interval
from solaris_lib.model.inference import InferRequest
from solaris_lib.model.train import MODEL_NAME
from solaris_lib.sparkutil import collect_garbage
from solaris_lib.speculation.config import MineConfig, RetrievalConfig, SpeculateConfig
from solaris_lib.speculation.pipeline import run_mine, run_retrieval, run_speculate
from solaris_lib.storage import is_complete
from solaris_lib.transfer.config import TransferConfig

log = logging.getLogger(__name__)

_PAIR = np.dtype([("a", "<i8"), ("b", "<i8")])


def pair_keys(a, b) -> np.ndarray:
    """(n,) structured (a, b) keys that sort and search lexicographically (any int64)."""
    keys = np.empty(len(a), _PAIR)
    keys["a"], keys["b"] = a, b
    return keys


@dataclass(frozen=True)
class KeyedValues:
    """One level's table: ``keys`` (n,) sorted (a, b) pairs, e.g. (user, item), and their
    ``values`` (n, dim) float16 (the published bytes)."""

    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, a, b, values: np.ndarray) -> KeyedValues:
        keys = pair_keys(a, b)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], values[order])

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, a, b) -> tuple[np.ndarray, np.ndarray]:
        """(held (m,) bool, row (m,) int64 of each held (a, b) in ``values``; 0 elsewhere)."""
        if not len(self.keys):
            return np.zeros(len(a), bool), np.zeros(len(a), np.int64)
        key = pair_keys(a, b)
        pos = np.clip(np.searchsorted(self.keys, key), 0, len(self.keys) - 1)
        held = self.keys[pos] == key
        return held, np.where(held, pos, 0)


@dataclass(frozen=True)
class ServedCache:
    """The cache that served ``interval``: the tables of the run for the previous interval.

    ``exact`` keyed by (user, item); ``cluster`` by (user, cluster id), with ``clusters`` the
    item -> cluster table (both None without the cluster level); ``priors`` by (item, 0) (None
    without the ITEM level); ``users`` (sorted) the users of the exact table (the speculated
    users). Every embedding is as of ``interval.start``.
    """

    interval: Interval
    exact: KeyedValues
    cluster: KeyedValues | None
    priors: KeyedValues | None
    clusters: ItemClusters | None
    users: np.ndarray
    scorer: str

    def levels(self, users: np.ndarray, items: np.ndarray, fallback: bool = True) -> np.ndarray:
        """(n,) int8 :class:`Level` of each looked-up (user, item) row; ``fallback`` False
        serves the exact level only."""
        return self._resolve(self._find(users, items, fallback))

    def lookup(self, users: np.ndarray, items: np.ndarray,
               fallback: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(level (n,) int8 :class:`Level`, embedding (n, dim) float32, zeros on a miss)."""
        found = self._find(users, items, fallback)
        level = self._resolve(found)
        emb = np.zeros((len(level), self.exact.values.shape[1]), np.float32)
        for code, (table, _, rows) in found.items():
            served = level == code
            emb[served] = table.values[rows[served]]
        return level, emb

    def _find(self, users, items, fallback: bool) -> dict:
        """{level: (its table, held (n,) bool, row (n,) in the table)} of the levels served."""
        users, items = np.asarray(users, np.int64), np.asarray(items, np.int64)
        found = {Level.EXACT: (self.exact, *self.exact.find(users, items))}
        if fallback and self.clusters is not None:
            found[Level.CLUSTER] = (self.cluster,
                                    *self.cluster.find(users, self.clusters.of(items)))
            if self.priors is not None:
                found[Level.ITEM] = (self.priors,
                                     *self.priors.find(items, np.zeros(len(items), np.int64)))
        return found

    @staticmethod
    def _resolve(found: dict) -> np.ndarray:
        """The client's rule (:func:`resolve_levels`) over what the tables hold."""
        held = [found[lv][1] if lv in found else None
                for lv in (Level.EXACT, Level.CLUSTER, Level.ITEM)]
        return resolve_levels(*held)

    def known(self, users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the user was speculated (n,) bool, the item has a cluster (n,) bool)."""
        known_item = (self.clusters.of(items) >= 0 if self.clusters is not None
                      else np.zeros(len(items), bool))
        return np.isin(users, self.users), known_item


def _values(table, dim: int) -> np.ndarray:
    """(n, dim) float16 of a table's ``embedding`` column (``dim`` fp16 each, as infer writes)."""
    return fixed_width_values(table.column("embedding"), 2 * dim).view("<f2")


def load_served(layout: DataLayout, run: Interval, served: Interval, scorer: str,
                dim: int) -> ServedCache:
    """The :class:`ServedCache` of ``served`` from the tables the infer stage wrote for ``run``
    (embeddings of ``dim``); without complete fallback tables, the exact level only."""
    exact = pq.read_table(layout.output(EMBEDDINGS, run), columns=["user_id", "item_id",
                                                                  "embedding"])
    values = _values(exact, dim)
    users = exact.column("user_id").to_numpy()
    cache = ServedCache(served, KeyedValues.of(users, exact.column("item_id").to_numpy(), values),
                        None, None, None, np.unique(users), scorer)
    paths = {name: layout.output(EMBEDDINGS, run, name)
             for name in (CLUSTER_EMBEDDINGS, ITEM_CLUSTERS, ITEM_PRIORS)}
    if not all(is_complete(paths[name]) for name in (CLUSTER_EMBEDDINGS, ITEM_CLUSTERS)):
        return cache
    cl = pq.read_table(paths[CLUSTER_EMBEDDINGS], columns=["user_id", "cluster_id", "embedding"])
    items = pq.read_table(paths[ITEM_CLUSTERS]).sort_by("item_id")
    clusters = ItemClusters(items.column("item_id").to_numpy(),
                            items.column("cluster_id").to_numpy())
    cluster = KeyedValues.of(cl.column("user_id").to_numpy(), cl.column("cluster_id").to_numpy(),
                             _values(cl, dim))
    priors = None
    if is_complete(paths[ITEM_PRIORS]):
        pr = pq.read_table(paths[ITEM_PRIORS], columns=["item_id", "embedding"])
        priors = KeyedValues.of(pr.column("item_id").to_numpy(), np.zeros(pr.num_rows, np.int64),
                                _values(pr, dim))
    return ServedCache(served, cache.exact, cluster, priors, clusters, cache.users, scorer)


class Replay:
    """Runs the precompute stages for consecutive intervals under ``work_root`` (a scratch data
    root: its ``logs`` links to ``logs_root``) with the FM ``fm`` (a
    :class:`~solaris_lib.model.online.FoundationEmbedder`, written there as a model version)."""

    def __init__(self, spark, logs_root: str, work_root: str, fm,
                 config: TransferConfig) -> None:
        os.makedirs(work_root, exist_ok=True)
        os.symlink(os.path.abspath(logs_root), join(work_root, "logs"))
        self.spark, self.fm, self.config = spark, fm, config
        self.settings = load_settings(data_root=work_root, model_dir=join(work_root, "models"),
                                      fallback_clusters=config.clusters)
        self.layout = DataLayout.from_settings(self.settings)
        artefact.write_version(self.layout.model(MODEL_NAME), fm.version, fm.net.state_dict(),
                               fm.cfg, {}, {}, factory=fm.cfg.factory)
        self.mine_cfg = MineConfig(lookback=config.lookback)
        self.retrieval_cfg = RetrievalConfig(lookback=config.lookback, seed=config.seed)
        self.spec_cfg = SpeculateConfig(budget_per_user=config.budget_per_user, seed=config.seed,
                                        scorer=config.scorer)
        self._mined: set[str] = set()
        self._retrieval: str | None = None

    def serve(self, interval: Interval) -> ServedCache:
        """The cache for ``interval``: the run for the previous interval, as of its start."""
        started = time.monotonic()
        run = interval.previous()
        if self._retrieval is None:
            run_retrieval(self.spark, self.layout, run.previous(), self.retrieval_cfg)
            self._retrieval = run.previous().key
        for each in (run.previous(), run):
            self._mine(each)
        spec = run_speculate(self.spark, self.layout, run, self.spec_cfg)
        embed_interval(self.spark, self.settings, InferRequest(run, self.fm.version))
        cache = load_served(self.layout, run, interval, spec["scorer"], self.fm.dim)
        collect_garbage(self.spark)
        log.info("cache for %s: %d pairs of %d users (%s scorer) in %.1f s", interval.key,
                 len(cache.exact), len(cache.users), cache.scorer, time.monotonic() - started)
        return cache

    def _mine(self, run: Interval) -> None:
        if run.key not in self._mined:
            run_mine(self.spark, self.layout, run, self.mine_cfg)
            self._mined.add(run.key)
