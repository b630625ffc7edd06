"""Counters the caller can read: hits, misses, errors by kind, latency percentiles.

Lookups add to :class:`Counters` under one short lock; :meth:`Counters.snapshot` returns an
immutable :class:`ClientStats`. Latency goes into a log-bucketed histogram (4 % wide buckets
from 1 us to 60 s), so percentiles cost no memory per call and are exact to within 4 %.
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, fields

_GROWTH = 1.04
_BOUNDS_US = [_GROWTH**k for k in range(int(math.log(60e6) / math.log(_GROWTH)) + 2)]
ERROR_KINDS = ("timeout", "connection", "server", "corrupt")


class LatencyHistogram:
    """Counts of latencies (us) per log bucket; not locked (the owner locks)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(_BOUNDS_US) + 1)
        self.total = 0
        self.sum_us = 0.0
        self.max_us = 0.0

    def add(self, micros: float) -> None:
        self.counts[bisect.bisect_left(_BOUNDS_US, micros)] += 1
        self.total += 1
        self.sum_us += micros
        self.max_us = max(self.max_us, micros)

    def percentile(self, q: float) -> float:
        """Upper bound (us) of the bucket holding the ``q``-quantile (0 < q <= 1); 0 when empty."""
        if not self.total:
            return 0.0
        rank = max(1, math.ceil(q * self.total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(_BOUNDS_US[min(index, len(_BOUNDS_US) - 1)], self.max_us)
        return self.max_us


@dataclass(frozen=True)
class ClientStats:
    """A snapshot of a client's counters since it was created (or last reset).

    ``pairs`` = ``hits + misses``: every (user, item) row answered, errors included (their rows
    are misses). ``errors`` = ``timeouts + connection_errors + server_errors``: failed calls.
    ``short_circuited``: calls answered with misses at once because the node's breaker was open.
    ``cluster_hits``: missed rows answered at the hierarchical fallback's cluster level (counted
    in ``misses`` too: ``hit`` is False for them). ``item_hits``: missed rows answered at the
    ITEM level (the item's prior, from memory; also counted in ``misses``).
    ``cluster_table_errors``: versions served without their cluster (or item) level because the
    item -> cluster (or item-prior) table was missing or malformed; ``tables_too_large``:
    levels not served because their table is larger than ``max_table_bytes``. ``failovers``:
    switches to the failover version because the alias's version was unusable.
    """

    lookups: int = 0
    pairs: int = 0
    hits: int = 0
    misses: int = 0
    errors: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    server_errors: int = 0
    corrupt_values: int = 0
    cluster_hits: int = 0
    item_hits: int = 0
    cluster_table_errors: int = 0
    tables_too_large: int = 0
    short_circuited: int = 0
    no_version: int = 0
    breaker_opens: int = 0
    alias_refreshes: int = 0
    refresh_errors: int = 0
    version_switches: int = 0
    failovers: int = 0
    misses_sampled: int = 0
    misses_dropped: int = 0
    misses_written: int = 0
    latency_p50_us: float = 0.0
    latency_p99_us: float = 0.0
    latency_max_us: float = 0.0
    latency_mean_us: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.pairs if self.pairs else 0.0

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_COUNTERS = [f.name for f in fields(ClientStats) if not f.name.startswith("latency_")]


class Counters:
    """The live, thread-safe counters behind :class:`ClientStats`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values = dict.fromkeys(_COUNTERS, 0)
        self.latency = LatencyHistogram()

    def add(self, **amounts: int) -> None:
        with self.lock:
            for name, amount in amounts.items():
                self.values[name] += amount

    def record_lookup(self, pairs: int, hits: int, micros: float, **extra: int) -> None:
        """One answered lookup (the request path's only lock acquisition)."""
        with self.lock:
            values = self.values
            values["lookups"] += 1
            values["pairs"] += pairs
            values["hits"] += hits
            values["misses"] += pairs - hits
            for name, amount in extra.items():
                values[name] += amount
            self.latency.add(micros)

    def snapshot(self, reset: bool = False) -> ClientStats:
        with self.lock:
            latency = self.latency
            stats = ClientStats(
                **self.values,
                latency_p50_us=latency.percentile(0.5),
                latency_p99_us=latency.percentile(0.99),
                latency_max_us=latency.max_us,
                latency_mean_us=latency.sum_us / latency.total if latency.total else 0.0,
            )
            if reset:
                self.values = dict.fromkeys(_COUNTERS, 0)
                self.latency = LatencyHistogram()
        return stats
