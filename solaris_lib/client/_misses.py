"""Sampling lookup misses into the ``P:misses`` stream without a round trip on the request path.

A sampled lookup puts ``(user, missed item ids, epoch ms)`` on a bounded queue (dropped and
counted when full); the client's background thread drains it and writes one stream entry per
sampled lookup with pipelined ``XADD P:misses MAXLEN ~ N * user U items a,b,c ts T``
(the entry format of ``docs/pipeline.md``, read by the next speculation run).
"""

from __future__ import annotations

import queue
import random
import time
from dataclasses import dataclass

import numpy as np

from solaris_lib.cache.format import MISS_MAX_ITEMS
from solaris_lib.client._stats import Counters


@dataclass(frozen=True)
class MissEntry:
    """One sampled lookup's misses."""

    user_id: int
    item_ids: np.ndarray  # (k,) int64, the items that missed, in request order
    ts_ms: int


class MissSampler:
    """Decides which lookups to record and queues them for the background writer."""

    def __init__(self, rate: float, capacity: int, counters: Counters) -> None:
        self.rate = rate
        self._queue: queue.Queue[MissEntry | None] = queue.Queue(maxsize=capacity)
        self._counters = counters
        self._random = random.Random()

    def offer(self, user_id: int, items: np.ndarray, hit: np.ndarray) -> None:
        """Request path: maybe queue this lookup's misses (a few microseconds when sampled)."""
        if self.rate <= 0 or self._random.random() >= self.rate:
            return
        missed = items[~hit][:MISS_MAX_ITEMS]  # a bounded entry (readers refuse longer ones)
        entry = MissEntry(int(user_id), missed.copy(), int(time.time() * 1000))
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self._counters.add(misses_dropped=1)
            return
        self._counters.add(misses_sampled=1)

    def wake(self) -> None:
        """Interrupt the background thread's wait (a sentinel that carries no entry)."""
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass

    def wait(self, timeout_s: float, max_entries: int = 1000) -> list[MissEntry]:
        """Block up to ``timeout_s`` for the first entry, then take whatever else is queued."""
        entries: list[MissEntry] = []
        try:
            first = self._queue.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return entries
        if first is not None:
            entries.append(first)
        while len(entries) < max_entries:
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                break
            if entry is not None:
                entries.append(entry)
        return entries

    def pending(self) -> int:
        return self._queue.qsize()


def xadd_commands(stream_key: str, entries: list[MissEntry], maxlen: int) -> list[tuple]:
    """One XADD per entry, each trimming the stream to about ``maxlen`` entries."""
    return [("XADD", stream_key, "MAXLEN", "~", maxlen, "*", "user", entry.user_id,
             "items", ",".join(map(str, entry.item_ids.tolist())), "ts", entry.ts_ms)
            for entry in entries]
