"""What serving would have had: the cache of each interval, rebuilt without leaking the future.

For the served interval ``t = [s, s + L)`` the cache holds exactly the pairs chosen by the
speculation run for ``t - 1 = [s - L, s)`` (the pipeline's own functions: mine, ALS retrieval,
candidates, learned scorer, budgets; one SparkSession), and each pair's embedding is the FM's
output for the user's history **as of s** (events strictly before ``s``), rounded to fp16 as the
cache stores it. The speculation run reads only logs before ``s``; its scorer is trained on the
run before it (candidates as of ``s - L``, labels from ``[s - L, s)``), as
:func:`solaris_lib.speculation.pipeline.run_speculate` does.

Only the embeddings of pairs that the interval's requests actually look up are computed (a
precomputed pair nobody asks for never reaches a ranker), which gives the same features at a
fraction of the FM calls.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from solaris_lib.intervals import Interval
from solaris_lib.transfer.config import TransferConfig
from solaris_lib.transfer.fallback import NO_CLUSTER, ItemClusters, build_item_clusters

log = logging.getLogger(__name__)

EXACT, CLUSTER, MISS, ITEM = 0, 1, 2, 3  # codes of the experiment's rows (saved in rows/)
ITEM_PRIOR_USER = -1  # a user id absent from every history: the FM sees an empty history


@dataclass(frozen=True)
class ServedCache:
    """The cache that served ``interval``: pairs speculated by the previous interval's run.

    ``pair_users``/``pair_items`` (P,) int64 sorted by (user, item); ``users`` the speculated
    users (sorted unique); ``clusters`` the item clusters of that run (None: no fallback).
    """

    interval: Interval
    pair_users: np.ndarray
    pair_items: np.ndarray
    users: np.ndarray
    clusters: ItemClusters | None
    scorer: str

    @property
    def asof(self) -> datetime:
        return self.interval.start

    def has_pair(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """(n,) bool: the pair was precomputed for this interval."""
        return _pair_in(self.pair_users, self.pair_items, users, items)

    def levels(self, users: np.ndarray, items: np.ndarray, fallback: bool) -> tuple[np.ndarray,
                                                                                   np.ndarray]:
        """(level (n,) int8: EXACT / CLUSTER / ITEM / MISS, cluster (n,) int32 or NO_CLUSTER).

        With ``fallback``: CLUSTER when not exact, the user was speculated and the item has a
        cluster; ITEM when the user was not speculated and the item is live (in the run's item
        table: it has a cluster, so the publisher stored its prior); MISS otherwise."""
        exact = self.has_pair(users, items)
        cluster = (self.clusters.lookup(items) if self.clusters is not None
                   else np.full(len(items), NO_CLUSTER, np.int32))
        known_item = fallback & ~exact & (cluster != NO_CLUSTER)
        speculated = np.isin(users, self.users)
        level = np.select([exact, known_item & speculated, known_item & ~speculated],
                          [EXACT, CLUSTER, ITEM], MISS).astype(np.int8)
        return level, cluster


_PAIR = np.dtype([("u", "<i8"), ("i", "<i8")])


def pair_keys(users, items) -> np.ndarray:
    """(n,) structured (user, item) keys that sort and search lexicographically (any int64)."""
    keys = np.empty(len(users), _PAIR)
    keys["u"], keys["i"] = users, items
    return keys


def _pair_in(ref_u, ref_i, users, items) -> np.ndarray:
    """Membership of (users, items) pairs in the reference pairs (vectorised)."""
    if not len(ref_u):
        return np.zeros(len(users), bool)
    ref = np.sort(pair_keys(ref_u, ref_i))
    key = pair_keys(users, items)
    pos = np.clip(np.searchsorted(ref, key), 0, len(ref) - 1)
    return ref[pos] == key


class Speculator:
    """Runs the speculation pipeline for consecutive intervals in one SparkSession."""

    def __init__(self, spark, logs_root: str, config: TransferConfig,
                 retrieval_asof: datetime) -> None:
        from solaris_lib.speculation.config import MineConfig, RetrievalConfig, SpeculateConfig

        self.spark, self.logs_root, self.config = spark, logs_root, config
        self.mine_cfg = MineConfig(lookback=config.lookback)
        self.als_cfg = RetrievalConfig(lookback=config.lookback, seed=config.seed)
        self.spec_cfg = SpeculateConfig(budget_per_user=config.budget_per_user, seed=config.seed,
                                        scorer=config.scorer)
        self._mined: dict[datetime, object] = {}
        self.retrieval_asof = retrieval_asof
        self._factors: tuple | None = None

    def _logs(self, start: datetime, end: datetime):
        from solaris_lib.logs.reader import read_window_spark

        return read_window_spark(self.spark, self.logs_root, Interval(start, end))

    def factors(self, asof: datetime):
        """Retrieval factors (ALS and the choice model) trained once, on the lookback before ``retrieval_asof`` (the first
        speculation run's time), and reused by every later run: no run sees factors trained on
        logs at or after its own time, as with a retrieval job that runs less often than
        speculation (one ALS and one choice-model fit per experiment keep the report fast)."""
        from solaris_lib.speculation.retrieval import train_factors

        if asof < self.retrieval_asof:
            raise ValueError(f"no retrieval factors as of {asof} (trained at {self.retrieval_asof})")
        if self._factors is None:
            cut = self.retrieval_asof
            fitted = train_factors(self._logs(cut - self.config.lookback, cut), cut, self.als_cfg)
            self._factors = tuple(f.cache() if f is not None else None for f in fitted)
        return self._factors

    def mined(self, asof: datetime):
        from solaris_lib.speculation.pipeline import mined_in_memory

        if asof not in self._mined:
            logs = self._logs(asof - self.config.lookback, asof)
            self._mined[asof] = mined_in_memory(self.spark, logs, asof, self.mine_cfg,
                                                self.factors(asof))
        return self._mined[asof]

    def serve(self, interval: Interval, fallback: bool = True) -> ServedCache:
        """The cache for ``interval``: the run for the previous interval, as of ``interval.start``."""
        from solaris_lib.sparkutil import collect_garbage
        from solaris_lib.speculation.pipeline import speculate_frames

        started = time.monotonic()
        s, length = interval.start, interval.length
        mined = self.mined(s)
        train_on = None
        if self.config.scorer != "heuristic":
            train_on = (self.mined(s - length), self._logs(s - length, s))
        result = speculate_frames(self.spark, mined, self.spec_cfg, train_on=train_on)
        pairs = result.pairs.select("user_id", "item_id").orderBy("user_id", "item_id").toArrow()
        users = pairs.column("user_id").to_numpy().astype(np.int64)
        items = pairs.column("item_id").to_numpy().astype(np.int64)
        result.release()
        clusters = self._clusters(mined) if fallback else None
        self._forget_before(s - length)
        collect_garbage(self.spark)
        log.info("cache for %s: %d pairs of %d users (%s scorer) in %.1f s", interval.key,
                 len(users), len(np.unique(users)), result.scorer, time.monotonic() - started)
        return ServedCache(interval, users, items, np.unique(users), clusters, result.scorer)

    def _clusters(self, mined) -> ItemClusters:
        """Clusters of the run's ALS item factors plus popularity buckets of the mined items."""
        cfg = self.config
        if mined.item_factors is not None:
            f = mined.item_factors.orderBy("item_id").toArrow()
            f_items = f.column("item_id").to_numpy()
            factors = np.stack(f.column("factor").to_numpy(zero_copy_only=False)) if len(f_items) \
                else np.zeros((0, self.als_cfg.rank), np.float32)
        else:
            f_items, factors = np.zeros(0, np.int64), np.zeros((0, self.als_cfg.rank), np.float32)
        stats = mined.item_stats.select("item_id", "popularity").orderBy("item_id").toArrow()
        return build_item_clusters(f_items, factors, stats.column("item_id").to_numpy(),
                                   stats.column("popularity").to_numpy(), k=cfg.clusters,
                                   buckets=cfg.popularity_buckets, seed=cfg.seed)

    def close(self) -> None:
        """Release every cached frame (mined tables, their derived queries, the factors)."""
        self._forget(list(self._mined))
        for frame in self._factors or ():
            if frame is not None:
                frame.unpersist()
        self._factors = None

    def _forget_before(self, asof: datetime) -> None:
        self._forget([k for k in self._mined if k < asof])

    def _forget(self, keys) -> None:
        """Drop the mined runs of ``keys`` and release what they cached."""
        for key in keys:
            self._mined.pop(key).release()
