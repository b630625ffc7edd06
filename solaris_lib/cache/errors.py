"""The exceptions of the embedding cache (publisher and lookup client).

::

    SolarisError                      (solaris_lib.errors)
    └── CacheError                    anything about the Redis embedding cache
        ├── CacheConfigError          bad URL or option (also a ConfigError: exit code 2)
        ├── CacheUnavailableError     the server could not be used for this request
        │   ├── CacheTimeoutError     no complete answer before the deadline
        │   └── CacheConnectionError  refused, reset, TLS or AUTH failure, dead server
        ├── CacheProtocolError        an error reply or a reply of the wrong shape
        ├── CacheFormatError          a manifest or value that breaks docs/cache-format.md
        └── PublishError              publishing a version failed; the served one is intact
            ├── PublishInputError     the embeddings partition is missing or malformed
            ├── PublishPermissionError    the Redis user may not run a publisher command
            ├── InsufficientMemoryError   the new version would not fit (bytes needed, free)
            └── VerificationError     the written version did not read back as written

The lookup client never raises the ``CacheUnavailableError`` family into its caller: it counts
them and answers with misses. They are raised inside the cache's own I/O layer and by the
publisher, which must fail loudly.
"""

from __future__ import annotations

from solaris_lib.errors import ConfigError, SolarisError


class CacheError(SolarisError):
    """Base class of every embedding-cache error."""


class CacheConfigError(CacheError, ConfigError):
    """A Redis URL or a cache option is malformed or unknown."""

    exit_code = 2


class CacheUnavailableError(CacheError):
    """The server could not serve this request (timeout, connection or AUTH failure)."""

    exit_code = 5


class CacheTimeoutError(CacheUnavailableError):
    """No complete reply arrived before the request's deadline."""


class CacheConnectionError(CacheUnavailableError):
    """Connecting, the TLS handshake, AUTH, sending or receiving failed."""


class CacheProtocolError(CacheError):
    """The server answered with an error reply, or with a reply of an unexpected shape."""

    exit_code = 5


class CacheFormatError(CacheError):
    """Stored data or metadata does not follow ``docs/cache-format.md``."""

    exit_code = 5


class PublishError(CacheError):
    """Publishing a version failed before its alias switch: the served version is unchanged."""

    exit_code = 6


class PublishInputError(PublishError):
    """The embeddings partition to publish is missing, incomplete or has the wrong columns."""

    exit_code = 2


class PublishPermissionError(PublishError):
    """The URL's Redis user lacks a permission the publisher needs (checked before reading)."""

    exit_code = 2


class InsufficientMemoryError(PublishError):
    """The server lacks the memory for the new version (the message says how much is needed)."""

    def __init__(self, message: str, needed_bytes: int, free_bytes: int) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes


class VerificationError(PublishError):
    """The written version's row count or sampled read-back differs from its input."""


class EvictionPolicyError(PublishError):
    """The server's ``maxmemory-policy`` may evict cached pairs: refused before writing, or
    found after the switch (the version is served but may lose pairs)."""

    exit_code = 2
