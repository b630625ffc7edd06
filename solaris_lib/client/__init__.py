"""The thin online lookup client of the SOLARIS embedding cache.

::

    from solaris_lib.client import SolarisClient

    with SolarisClient.from_url("redis://127.0.0.1:6379/0", timeout_ms=20, dim=64) as client:
        result = client.lookup(user_id, item_ids)   # one round trip, never raises I/O errors
        result.embeddings   # (n, 64) float32; missed rows hold the fallback (zeros)
        result.hit          # (n,) bool
        client.stats()      # hits, misses, errors by kind, latency p50/p99 (us)

Unit tests swap the transport for an in-process one::

    store = InMemoryRedis()            # a dict-backed handler; publish into it, or write one
    client = SolarisClient.from_url("redis://unused", transport=MockTransport(store))

Only the names in ``__all__`` are public; modules starting with ``_`` may change.
"""

from solaris_lib.cache.errors import (
    CacheConfigError,
    CacheConnectionError,
    CacheError,
    CacheFormatError,
    CacheProtocolError,
    CacheTimeoutError,
    CacheUnavailableError,
)
from solaris_lib.client._breaker import Backoff, CircuitBreaker
from solaris_lib.client._client import SolarisClient
from solaris_lib.client._options import ClientOptions
from solaris_lib.client._result import LookupResult
from solaris_lib.client._stats import ClientStats
from solaris_lib.client._transport import InMemoryRedis, MockTransport, RedisTransport, Transport
from solaris_lib.fallback import Level

__all__ = [
    "Backoff",
    "CacheConfigError",
    "CacheConnectionError",
    "CacheError",
    "CacheFormatError",
    "CacheProtocolError",
    "CacheTimeoutError",
    "CacheUnavailableError",
    "CircuitBreaker",
    "ClientOptions",
    "ClientStats",
    "InMemoryRedis",
    "Level",
    "LookupResult",
    "MockTransport",
    "RedisTransport",
    "SolarisClient",
    "Transport",
]
