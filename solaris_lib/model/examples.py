"""Model inputs from request logs and from the mined user-history table (numpy, no torch).

An *event* is a row the user was shown (``position`` not null; for logs that carry no positions
at all, every row). A training *example* is one request: the user's events strictly before the
request's ``ts`` (the most recent ``max_history``) and the request's labelled candidates (rows
whose ``clicked`` is not null). Everything is vectorised: one sort of events and requests
together finds every request's history without a per-row Python loop.

Click codes follow :mod:`solaris_lib.model.network`: 0 not clicked, 1 clicked, 2 unknown.
Times are int64 microseconds since the epoch (UTC); gaps given to the network are float32 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris_lib.logs.schema import timestamps_us

CLICK_YES, CLICK_UNKNOWN = 1, 2


def _click_codes(column) -> np.ndarray:
    """(n,) int8: 0/1 for False/True clicks, 2 where the click is unknown (null)."""
    filled = pc.fill_null(pc.cast(column, pa.int8()), CLICK_UNKNOWN)
    return filled.to_numpy(zero_copy_only=False).astype(np.int8)


@dataclass(frozen=True)
class EventLists:
    """Every user's events, sorted by (user, ts): a CSR table.

    ``users`` (U,) sorted unique int64; the events of ``users[k]`` are
    ``offsets[k]:offsets[k+1]`` of ``items`` (E,) int64, ``ts_us`` (E,) int64, ``clicks`` (E,) int8.
    """

    users: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    ts_us: np.ndarray
    clicks: np.ndarray

    @classmethod
    def from_events(cls, users, items, ts_us, clicks) -> EventLists:
        """Group flat events (any order) by user, oldest first (ties: by item id, click code)."""
        order = np.lexsort((clicks, items, ts_us, users))
        users = np.asarray(users, np.int64)[order]
        uniq, starts = np.unique(users, return_index=True)
        offsets = np.append(starts, len(users)).astype(np.int64)
        return cls(uniq, offsets, np.asarray(items, np.int64)[order],
                   np.asarray(ts_us, np.int64)[order], np.asarray(clicks, np.int8)[order])

    @classmethod
    def from_logs(cls, table: pa.Table) -> EventLists:
        """Events of a request-log table: shown rows, or every row when no row has a position."""
        if "position" in table.column_names and table.column("position").null_count < len(table):
            table = table.filter(pc.is_valid(table.column("position")))
        clicks = (_click_codes(table.column("clicked")) if "clicked" in table.column_names
                  else np.full(len(table), CLICK_UNKNOWN, np.int8))
        return cls.from_events(table.column("user_id").to_numpy(), table.column("item_id").to_numpy(),
                               timestamps_us(table.column("ts")), clicks)

    @classmethod
    def from_user_history(cls, table: pa.Table) -> EventLists:
        """The mined ``user_history`` table (docs/pipeline.md): one row per user, list columns.

        Only events strictly before each row's ``asof`` are kept (the contract promises that).
        """
        lengths = pc.list_value_length(table.column("item_ids")).to_numpy(zero_copy_only=False)
        users = np.repeat(table.column("user_id").to_numpy(), np.nan_to_num(lengths).astype(int))
        ts = timestamps_us(pc.list_flatten(table.column("ts")))
        asof = np.repeat(timestamps_us(table.column("asof")), np.nan_to_num(lengths).astype(int))
        items = pc.list_flatten(table.column("item_ids")).to_numpy(zero_copy_only=False)
        clicks = _click_codes(pc.list_flatten(table.column("clicked")))
        keep = ts < asof
        return cls.from_events(users[keep], items[keep], ts[keep], clicks[keep])

    @classmethod
    def empty(cls) -> EventLists:
        z = np.zeros(0, np.int64)
        return cls(z, np.zeros(1, np.int64), z, z, np.zeros(0, np.int8))

    def bounds(self, user_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) (n,) int64: the slice of each user's events; empty for unknown users."""
        user_ids = np.asarray(user_ids, np.int64)
        row = np.searchsorted(self.users, user_ids)
        found = row < len(self.users)
        found[found] = self.users[row[found]] == user_ids[found]
        row = np.where(found, row, 0)
        lo = np.where(found, self.offsets[row], 0)
        hi = np.where(found, self.offsets[np.minimum(row + 1, len(self.offsets) - 1)], 0)
        return lo, hi

    def count_before(self, user_ids: np.ndarray, ts_us: np.ndarray) -> np.ndarray:
        """(n,) global index of each query's first event at or after ``ts_us`` (same user).

        One stable sort of events and queries: a query sorts before events of equal
        (user, ts), so its count of preceding events is "strictly before".
        """
        n_events = len(self.items)
        flat_users = np.repeat(self.users, np.diff(self.offsets))
        users = np.concatenate([np.asarray(user_ids, np.int64), flat_users])
        times = np.concatenate([np.asarray(ts_us, np.int64), self.ts_us])
        kind = np.concatenate([np.zeros(len(user_ids), np.int8), np.ones(n_events, np.int8)])
        order = np.lexsort((kind, times, users))
        is_event = kind[order].astype(np.int64)
        before = np.cumsum(is_event) - is_event
        out = np.empty(len(user_ids), np.int64)
        queries = order < len(user_ids)
        out[order[queries]] = before[queries]
        return out

    def history_bounds(self, user_ids: np.ndarray, ts_us: np.ndarray):
        """(lo, hi) (n,): each query's events strictly before ``ts_us`` (empty for unknown
        users)."""
        user_lo, user_hi = self.bounds(user_ids)
        hi = self.count_before(user_ids, ts_us)
        return np.where(user_hi > user_lo, user_lo, hi), hi

    @cached_property
    def click_positions(self) -> np.ndarray:
        """(C,) int64 sorted indices of the clicked events."""
        return np.flatnonzero(self.clicks == CLICK_YES).astype(np.int64)

    def history(self, lo, hi, now_us, recent: int, clicks: int = 0) -> dict[str, np.ndarray]:
        """Each query's history as (n, W) arrays, oldest first, right-aligned: the newest
        ``recent`` events of ``events[lo:hi]`` and, before them, the newest ``clicks`` clicked
        events. ``items`` int64, ``clicks`` int64, ``gaps`` float32 seconds before ``now_us``
        (n,), ``mask`` bool. ``W`` is at most ``recent + clicks``: columns no query fills are
        left out (at least one column is kept)."""
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        cut = np.maximum(lo, hi - recent)
        width = _width(hi - cut, recent)
        idx = hi[:, None] - width + np.arange(width)[None, :]
        mask = idx >= cut[:, None]
        if clicks:
            pos = self.click_positions
            c_lo, c_hi = np.searchsorted(pos, lo), np.searchsorted(pos, cut)
            c_width = _width(c_hi - c_lo, clicks)
            c_idx = c_hi[:, None] - c_width + np.arange(c_width)[None, :]
            c_mask = c_idx >= c_lo[:, None]
            events = pos[np.where(c_mask, c_idx, 0)] if len(pos) else np.zeros_like(c_idx)
            if c_width and c_mask.any():
                idx, mask = np.concatenate([events, idx], 1), np.concatenate([c_mask, mask], 1)
        return self._gather(idx, mask, now_us)

    def _gather(self, idx: np.ndarray, mask: np.ndarray, now_us) -> dict[str, np.ndarray]:
        safe = np.where(mask, idx, 0) if len(self.items) else np.zeros_like(idx)
        take = (lambda a: a[safe]) if len(self.items) else (lambda a: np.zeros(idx.shape, a.dtype))
        gaps = (np.asarray(now_us, np.int64)[:, None] - take(self.ts_us)) / 1e6
        return {
            "items": np.where(mask, take(self.items), 0),
            "clicks": np.where(mask, take(self.clicks), CLICK_UNKNOWN).astype(np.int64),
            "gaps": np.where(mask, gaps, 0.0).astype(np.float32),
            "mask": mask,
        }


def _width(sizes: np.ndarray, cap: int) -> int:
    """Columns needed for the largest of ``sizes`` (n,), capped at ``cap``, at least 1."""
    return int(min(cap, max(1, int(sizes.max()) if len(sizes) else 1)))


@dataclass(frozen=True)
class Examples:
    """Training examples: one per request with at least one labelled candidate.

    Request ``r``: ``user[r]``, ``ts_us[r]``, history ``events`` slice ``lo[r]:hi[r]`` (events
    strictly before ``ts_us[r]``); its labelled candidates ``t_offsets[r]:t_offsets[r+1]`` of
    ``t_items`` (int64) and ``t_labels`` (float32 0/1).
    """

    events: EventLists
    user: np.ndarray
    ts_us: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    t_offsets: np.ndarray
    t_items: np.ndarray
    t_labels: np.ndarray
    t_rows: np.ndarray  # (pairs,) int64 row of each pair in the source table

    def __len__(self) -> int:
        return len(self.user)

    @property
    def pairs(self) -> int:
        return len(self.t_items)

    def select(self, keep: np.ndarray) -> Examples:
        """The examples where ``keep`` (R,) bool is True."""
        rows = np.flatnonzero(keep)
        counts = np.diff(self.t_offsets)[rows]
        pair_idx = ranges(self.t_offsets[rows], counts)
        return Examples(self.events, self.user[rows], self.ts_us[rows], self.lo[rows],
                        self.hi[rows], np.append(0, np.cumsum(counts)).astype(np.int64),
                        self.t_items[pair_idx], self.t_labels[pair_idx], self.t_rows[pair_idx])

    def batch(self, rows: np.ndarray, recent: int, clicks: int) -> dict[str, np.ndarray]:
        """Arrays of the examples ``rows``: the history (B, L) of :meth:`EventLists.history`
        plus ``targets`` (B, T) int64, ``labels`` (B, T) float32 and ``tmask`` (B, T) bool."""
        out = self.events.history(self.lo[rows], self.hi[rows], self.ts_us[rows], recent, clicks)
        starts, counts = self.t_offsets[rows], np.diff(self.t_offsets)[rows]
        width = int(counts.max()) if len(rows) else 0
        idx = starts[:, None] + np.arange(width)[None, :]
        tmask = np.arange(width)[None, :] < counts[:, None]
        safe = np.where(tmask, idx, 0)
        out["targets"] = np.where(tmask, self.t_items[safe] if self.pairs else 0, 0)
        out["labels"] = np.where(tmask, self.t_labels[safe] if self.pairs else 0, 0).astype(
            np.float32)
        out["tmask"] = tmask
        return out


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for each (s, c), vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    shift = np.repeat(starts - np.append(0, np.cumsum(counts)[:-1]), counts)
    return np.arange(total, dtype=np.int64) + shift


def build_examples(table: pa.Table) -> Examples:
    """Examples from a request-log table (the contract schema), sorted by (ts, user, request).

    Candidates with a null ``clicked`` are no labels; requests without any label are skipped.
    """
    events = EventLists.from_logs(table)
    if "clicked" not in table.column_names:
        source = np.zeros(0, np.int64)
    else:
        source = np.flatnonzero(table.column("clicked").is_valid().to_numpy(zero_copy_only=False))
    labeled = table.take(source)
    codes = pc.dictionary_encode(labeled.column("request_id")).combine_chunks().indices
    code = codes.to_numpy(zero_copy_only=False).astype(np.int64)
    users = labeled.column("user_id").to_numpy()
    ts = timestamps_us(labeled.column("ts"))
    items = labeled.column("item_id").to_numpy()
    labels = labeled.column("clicked").to_numpy(zero_copy_only=False).astype(np.float32)
    order = np.lexsort((labels, items, code, users, ts))
    code, users, ts, items, labels = code[order], users[order], ts[order], items[order], labels[order]
    first = np.flatnonzero(np.r_[True, code[1:] != code[:-1]]) if len(code) else np.zeros(0, int)
    req_user, req_ts = users[first], ts[first]
    lo, hi = events.history_bounds(req_user, req_ts)
    return Examples(events, req_user, req_ts, lo, hi, np.append(first, len(code)).astype(np.int64),
                    items, labels, source[order].astype(np.int64))


def decayed_counts(events: EventLists, user_ids: np.ndarray, ts_us: np.ndarray,
                   half_life_s: float, clicks_only: bool) -> np.ndarray:
    """(n,) float64: per query, the user's events (or clicks) strictly before ``ts_us``, each
    weighted ``2 ** (-age / half_life_s)``.

    One pass over each user's events in time order: the running sum is decayed to the next
    event or query and topped up by the event's weight (exact, no overflow for any span).
    """
    weight = (events.clicks == CLICK_YES) if clicks_only else np.ones(len(events.items), bool)
    lo, hi = events.history_bounds(user_ids, ts_us)
    out = np.zeros(len(user_ids), np.float64)
    order = np.lexsort((ts_us, user_ids))
    rate = np.log(2.0) / half_life_s / 1e6  # per microsecond
    state: dict[int, tuple[int, int, float]] = {}  # user -> (next event, time of sum, sum)
    for q in order:
        user = int(user_ids[q])
        nxt, at, total = state.get(user, (int(lo[q]), 0, 0.0))
        for e in range(nxt, int(hi[q])):
            total = total * math.exp(-rate * (int(events.ts_us[e]) - at)) + float(weight[e])
            at = int(events.ts_us[e])
        out[q] = total * math.exp(-rate * (int(ts_us[q]) - at)) if hi[q] > lo[q] else 0.0
        state[user] = (max(nxt, int(hi[q])), at, total)
    return out
