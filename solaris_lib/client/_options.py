"""The lookup client's options: keyword-only, checked once, immutable."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from solaris_lib.cache.errors import CacheConfigError
from solaris_lib.cache.format import check_prefix
from solaris_lib.client._breaker import CircuitBreaker


@dataclass(frozen=True)
class ClientOptions:
    """Everything :meth:`SolarisClient.from_url` accepts besides the URL.

    ``timeout_ms``: budget of one lookup, connection set-up included (ms); a lookup returns
    within it plus a small margin. ``dim``: the expected embedding dimension (versions of another
    dimension are refused; misses before the first version then have this width).
    ``fallback``: the (dim,) vector missed rows hold (zeros when None). ``refresh_interval_s``:
    how often the background thread re-reads the alias. ``background_timeout_ms``: budget of
    one background request (alias, manifest, probe, miss writes). ``breaker``: when to stop
    sending requests to a failing node and how to back off. ``miss_sample_rate``: share of
    lookups with misses recorded in the misses stream; ``miss_queue_size`` bounds the queue
    between lookups and the background writer (full: dropped, counted);
    ``miss_stream_maxlen``: approximate cap of the stream. ``max_table_bytes``: most memory
    (bytes) a version's fallback tables may take in the client (from the manifest's counts,
    checked before anything is read); a larger table is not loaded and its level not served.
    """

    key_prefix: str = "solaris"
    timeout_ms: float = 20.0
    dim: int | None = None
    fallback: tuple[float, ...] | None = None
    refresh_interval_s: float = 1.0
    background_timeout_ms: float = 1000.0
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    miss_sample_rate: float = 0.01
    miss_queue_size: int = 10_000
    miss_stream_maxlen: int = 1_000_000
    max_table_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        check_prefix(self.key_prefix)
        problems = [
            text for bad, text in (
                (self.timeout_ms <= 0, "timeout_ms must be > 0"),
                (self.background_timeout_ms <= 0, "background_timeout_ms must be > 0"),
                (self.refresh_interval_s <= 0, "refresh_interval_s must be > 0"),
                (not 0.0 <= self.miss_sample_rate <= 1.0, "miss_sample_rate must be in [0, 1]"),
                (self.miss_queue_size < 1, "miss_queue_size must be >= 1"),
                (not 1 <= self.miss_stream_maxlen <= 10**8,
                 "miss_stream_maxlen must be in 1..10^8"),
                (self.max_table_bytes < 0, "max_table_bytes must be >= 0"),
                (self.fallback is not None and not np.isfinite(self.fallback).all(),
                 "fallback must be finite"),
                (self.dim is not None and self.dim < 1, "dim must be >= 1"),
                (self.fallback is not None and self.dim is not None
                 and len(self.fallback) != self.dim, "fallback must have dim values"),
            ) if bad
        ]
        if problems:
            raise CacheConfigError("invalid client options: " + "; ".join(problems))

    @classmethod
    def build(cls, **options: object) -> ClientOptions:
        """Options from keywords; a fallback vector is stored as a tuple (immutable)."""
        fallback = options.get("fallback")
        if fallback is not None:
            options["fallback"] = tuple(float(x) for x in np.asarray(fallback).ravel())
        return cls(**{k: v for k, v in options.items() if v is not None})

    @property
    def fallback_vector(self) -> np.ndarray | None:
        return None if self.fallback is None else np.asarray(self.fallback, dtype=np.float32)

    @property
    def expected_dim(self) -> int | None:
        return len(self.fallback) if self.fallback is not None else self.dim
