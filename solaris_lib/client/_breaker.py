"""Backoff and circuit breaking: after repeated failures a node is skipped instead of waited on.

The policies (:class:`Backoff`, :class:`CircuitBreaker`) are immutable options; each node gets
its own :class:`BreakerState`. While a node's breaker is open, lookups for keys on it answer
misses at once without I/O; the client's background thread probes the node when the backoff
has passed and closes the breaker on the first success, so no lookup ever pays for a probe.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from solaris_lib.cache.errors import CacheConfigError


@dataclass(frozen=True)
class Backoff:
    """Exponential delays between probes of a failed node: ``initial_ms * multiplier**k``."""

    initial_ms: float = 50.0
    max_ms: float = 5_000.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_ms <= self.max_ms or self.multiplier < 1:
            raise CacheConfigError(
                f"backoff needs 0 < initial_ms <= max_ms and multiplier >= 1, got {self}"
            )

    def delay_s(self, attempt: int) -> float:
        """Seconds to wait before probe number ``attempt`` (0-based)."""
        return min(self.initial_ms * self.multiplier ** min(attempt, 64), self.max_ms) / 1000.0


@dataclass(frozen=True)
class CircuitBreaker:
    """Open a node's breaker after ``failure_threshold`` consecutive failed requests."""

    failure_threshold: int = 3
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise CacheConfigError(f"failure_threshold must be >= 1, got {self.failure_threshold}")


class BreakerState:
    """One node's breaker: closed (requests flow) or open until its next probe succeeds."""

    def __init__(self, policy: CircuitBreaker, clock=time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._probes = 0
        self.open = False
        self.probe_at = 0.0
        self.opened_total = 0

    def record_success(self) -> None:
        if self._failures or self.open:
            with self._lock:
                self._failures = 0
                self._probes = 0
                self.open = False

    def record_failure(self) -> bool:
        """Count one failed request; True when this failure opened the breaker."""
        with self._lock:
            self._failures += 1
            if self.open or self._failures < self._policy.failure_threshold:
                return False
            self.open = True
            self.opened_total += 1
            self.probe_at = self._clock() + self._policy.backoff.delay_s(0)
            return True

    def probe_due(self) -> bool:
        return self.open and self._clock() >= self.probe_at

    def probe_failed(self) -> None:
        """The background probe failed: wait longer before the next one."""
        with self._lock:
            self._probes += 1
            self.probe_at = self._clock() + self._policy.backoff.delay_s(self._probes)
