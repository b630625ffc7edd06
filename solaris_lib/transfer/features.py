"""The ranker's rows: every labelled (request, item) of a period, with what serving knew.

Per row (``N`` rows, in the order of :class:`~solaris_lib.model.examples.Examples` pairs):

* ``activity``: the user's events in ``[s - activity_window, s)``, ``s`` = the start of the
  row's interval (not the request time: serving features are refreshed per interval);
* ``popularity``: the item's logged rows in ``[s - popularity_window, s)``;
* ``level`` (EXACT / CLUSTER / ITEM / MISS) and ``embedding`` (N, D) float32 for the SOLARIS variants:
  the cache of the row's interval (:class:`~solaris_lib.transfer.cache.ServedCache`); zeros
  on a miss. ``exact_*`` ignore the fallback; ``fallback_*`` use it;
* ``fm_logit``: the FM served online (history strictly before the request): the ceiling, and
  the teacher of the distilled variant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

import numpy as np

from solaris_lib.model.examples import EventLists, Examples
from solaris_lib.transfer.cache import (
    CLUSTER,
    EXACT,
    ITEM,
    ITEM_PRIOR_USER,
    MISS,
    ServedCache,
)

log = logging.getLogger(__name__)

BATCH_USERS = 128


@dataclass
class RankerRows:
    """Column arrays of the ranker's rows (all (N,) unless noted)."""

    users: np.ndarray  # int64
    items: np.ndarray  # int64
    labels: np.ndarray  # float32 0/1
    ts_us: np.ndarray  # int64 request time
    interval: np.ndarray  # int32 index of the served interval
    activity: np.ndarray  # float32 events
    popularity: np.ndarray  # float32 rows
    fm_logit: np.ndarray  # float64
    exact_level: np.ndarray  # int8 EXACT or MISS
    exact_emb: np.ndarray  # (N, D) float32
    fallback_level: np.ndarray  # int8 EXACT / CLUSTER / ITEM / MISS
    fallback_emb: np.ndarray  # (N, D) float32

    def __len__(self) -> int:
        return len(self.users)

    def take(self, idx: np.ndarray) -> RankerRows:
        return RankerRows(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    @classmethod
    def concat(cls, parts: list[RankerRows]) -> RankerRows:
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                      for f in fields(cls)})


def window_counts(keys: np.ndarray, ts_us: np.ndarray, start_us: int, end_us: int,
                  query: np.ndarray) -> np.ndarray:
    """(m,) float32: how many of ``keys`` (n,) have ``start_us <= ts_us < end_us``, per query."""
    sel = (ts_us >= start_us) & (ts_us < end_us)
    uniq, counts = np.unique(keys[sel], return_counts=True)
    if not len(uniq):
        return np.zeros(len(query), np.float32)
    pos = np.clip(np.searchsorted(uniq, query), 0, len(uniq) - 1)
    return np.where(uniq[pos] == query, counts[pos], 0).astype(np.float32)


def embed_pairs(fm, events: EventLists, users: np.ndarray, items: np.ndarray,
                asof_us: int) -> np.ndarray:
    """(n, D) float32 FM embeddings of distinct pairs (sorted by user) with the history strictly
    before ``asof_us``, rounded through fp16 like the cache's bytes."""
    out = np.zeros((len(users), fm.dim), np.float32)
    if not len(users):
        return out
    uniq, starts, counts = np.unique(users, return_index=True, return_counts=True)
    for b in range(0, len(uniq), BATCH_USERS):
        lo = starts[b]
        hi = starts[min(b + BATCH_USERS, len(uniq)) - 1] + counts[min(b + BATCH_USERS, len(uniq)) - 1]
        emb, _ = fm.score_users(events, uniq[b:b + BATCH_USERS], counts[b:b + BATCH_USERS],
                                items[lo:hi], asof_us)
        out[lo:hi] = emb
    return out.astype("<f2").astype(np.float32)


def _embed_lookups(fm, events, users, keys, asof_us) -> np.ndarray:
    """Embeddings for rows (users, keys) where keys are the items looked up (dedup'd)."""
    pair = np.stack([users, keys], axis=1)
    uniq, inverse = np.unique(pair, axis=0, return_inverse=True)
    emb = embed_pairs(fm, events, uniq[:, 0].copy(), uniq[:, 1].copy(), asof_us)
    return emb[inverse.reshape(-1)]


def served_embeddings(fm, events: EventLists, cache: ServedCache, users: np.ndarray,
                      items: np.ndarray, fallback: bool) -> tuple[np.ndarray, np.ndarray]:
    """(level (n,) int8, embedding (n, D) float32) that serving got for each looked-up pair.

    EXACT rows: the FM embedding of (user, item) as of the cache's interval start; CLUSTER rows:
    of (user, the cluster's representative item); ITEM rows: of (empty history, item), the
    item's prior; MISS rows: zeros. Nothing else is computed."""
    level, cluster = cache.levels(users, items, fallback)
    emb = np.zeros((len(users), fm.dim), np.float32)
    asof_us = int(cache.asof.timestamp() * 1_000_000)
    target, who = items.copy(), users.copy()
    coarse = level == CLUSTER
    if coarse.any():
        target[coarse] = cache.clusters.representatives[cluster[coarse]]
    who[level == ITEM] = ITEM_PRIOR_USER  # absent from every history
    found = level != MISS
    if found.any():
        emb[found] = _embed_lookups(fm, events, who[found], target[found], asof_us)
    return level, emb


def interval_rows(fm, examples: Examples, fm_logits: np.ndarray, log_users: np.ndarray,
                  log_items: np.ndarray, log_ts: np.ndarray, cache: ServedCache, index: int,
                  config) -> RankerRows:
    """The rows of the requests in ``cache.interval`` (``examples`` cover at least them)."""
    s_us = int(cache.interval.start.timestamp() * 1_000_000)
    e_us = int(cache.interval.end.timestamp() * 1_000_000)
    counts = np.diff(examples.t_offsets)
    in_t = np.repeat((examples.ts_us >= s_us) & (examples.ts_us < e_us), counts)
    users = np.repeat(examples.user, counts)[in_t]
    items, labels = examples.t_items[in_t], examples.t_labels[in_t]
    ev = examples.events
    ev_users = np.repeat(ev.users, np.diff(ev.offsets))
    act_w = int(config.activity_window.total_seconds() * 1e6)
    pop_w = int(config.popularity_window.total_seconds() * 1e6)
    fb_level, fb_emb = served_embeddings(fm, ev, cache, users, items, fallback=True)
    hit = fb_level == EXACT  # the exact level does not depend on the fallback
    exact_level = np.where(hit, EXACT, MISS).astype(np.int8)
    exact_emb = np.where(hit[:, None], fb_emb, 0.0).astype(np.float32)
    return RankerRows(
        users=users, items=items, labels=labels.astype(np.float32),
        ts_us=np.repeat(examples.ts_us, counts)[in_t],
        interval=np.full(len(users), index, np.int32),
        activity=window_counts(ev_users, ev.ts_us, s_us - act_w, s_us, users),
        popularity=window_counts(log_items, log_ts, s_us - pop_w, s_us, items),
        fm_logit=np.asarray(fm_logits, np.float64)[in_t],
        exact_level=exact_level, exact_emb=exact_emb, fallback_level=fb_level, fallback_emb=fb_emb)


def coverage_by_level(cache: ServedCache, users: np.ndarray, items: np.ndarray) -> dict:
    """Row counts per level over logged rows (every scored candidate) of the interval."""
    exact, _ = cache.levels(users, items, fallback=False)
    level, _ = cache.levels(users, items, fallback=True)
    miss = level == MISS
    known_user = np.isin(users, cache.users)
    known_item = (cache.clusters.lookup(items) != -1 if cache.clusters is not None
                  else np.zeros(len(items), bool))
    return {"rows": int(len(users)), "exact": int((exact == EXACT).sum()),
            "cluster": int((level == CLUSTER).sum()), "item": int((level == ITEM).sum()),
            "miss": int(miss.sum()),
            "miss_user_only": int((miss & ~known_user & known_item).sum()),
            "miss_item_only": int((miss & known_user & ~known_item).sum()),
            "miss_user_and_item": int((miss & ~known_user & ~known_item).sum())}
