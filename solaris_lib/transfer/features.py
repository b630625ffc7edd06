"""The ranker's rows: every labelled (request, item) of a period, with what serving knew.

Per row (``N`` rows, in the order of :class:`~solaris_lib.model.examples.Examples` pairs):

* ``activity``: the user's events in ``[s - activity_window, s)``, ``s`` = the start of the
  row's interval (not the request time: serving features are refreshed per interval);
* ``popularity``: the item's logged rows in ``[s - popularity_window, s)``;
* ``level`` (:class:`~solaris_lib.fallback.Level`) and ``embedding`` (N, D) float32 for the
  SOLARIS variants: what the cache of the row's interval
  (:class:`~solaris_lib.transfer.replay.ServedCache`) serves for the pair, at the level the
  client's rule picks; zeros on a miss. ``exact_*`` ignore the fallback; ``fallback_*`` use it;
* ``fm_logit``: the FM served online (history strictly before the request): the ceiling, and
  the teacher of the distilled variant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

import numpy as np

from solaris_lib.fallback import Level
from solaris_lib.model.examples import Examples
from solaris_lib.transfer.replay import ServedCache

log = logging.getLogger(__name__)


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
    exact_level: np.ndarray  # int8 Level.EXACT or Level.MISS
    exact_emb: np.ndarray  # (N, D) float32
    fallback_level: np.ndarray  # int8 Level
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


def interval_rows(examples: Examples, fm_logits: np.ndarray, log_users: np.ndarray,
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
    fb_level, fb_emb = cache.lookup(users, items, fallback=True)
    hit = fb_level == Level.EXACT  # the exact level does not depend on the fallback
    exact_level = np.where(hit, Level.EXACT, Level.MISS).astype(np.int8)
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
    """Row counts per level over logged rows (every scored candidate) of the interval, and the
    rows the fallback leaves as misses by cause (user not speculated, item in no cluster)."""
    level = cache.levels(users, items, fallback=True)
    miss = level == Level.MISS
    known_user, known_item = cache.known(users, items)
    return {"rows": int(len(users)), "exact": int((level == Level.EXACT).sum()),
            "cluster": int((level == Level.CLUSTER).sum()),
            "item": int((level == Level.ITEM).sum()), "miss": int(miss.sum()),
            "miss_user_only": int((miss & ~known_user & known_item).sum()),
            "miss_item_only": int((miss & known_user & ~known_item).sum()),
            "miss_user_and_item": int((miss & ~known_user & ~known_item).sum())}
