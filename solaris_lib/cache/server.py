"""Administrative access to the cache: the alias, manifests, chunks, memory and settings of
each master, over redis-py (:mod:`connection`).

Used by the publisher's driver and the ``solaris cache-info`` command, never on the lookup
path. Every call has a generous timeout and raises :class:`CacheError` subclasses, so that a
publish fails loudly (and before its alias switch) when the server misbehaves.
"""

from __future__ import annotations

from solaris_lib.cache.connection import Nodes, connect, masters, translated
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheError
from solaris_lib.cache.format import Manifest, alias_key, manifest_key
from solaris_lib.cache.memory import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_VALUE, HashLimits

# Moves the alias to ARGV[1] unless it names a later interval (the first 16 characters of a
# version id are its interval key) and ARGV[2] is not "1". Returns the alias afterwards.
SWITCH_ALIAS = """
local current = redis.call('GET', KEYS[1])
if current and ARGV[2] ~= '1' and string.sub(current, 1, 16) > string.sub(ARGV[1], 1, 16) then
  return current
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"""


class CacheServer:
    """One cache deployment (a server or a cluster) under one key prefix."""

    def __init__(self, url: str, key_prefix: str, timeout_s: float = 10.0) -> None:
        self.endpoint = Endpoint.from_url(url)
        self.prefix = key_prefix
        self.client = connect(self.endpoint, timeout_s)
        self.timeout_s = timeout_s
        with translated(f"PING {self.endpoint.redacted()}"):
            self.client.ping()

    def nodes(self) -> Nodes:
        """Routing of hash tags to masters over this client's slot map."""
        return Nodes(self.endpoint, self.timeout_s, admin=self.client)

    def masters(self) -> list[tuple[str, object]]:
        """``(host:port, redis-py client)`` of every master."""
        with translated("listing the masters"):
            return masters(self.client)

    def served_version(self) -> str | None:
        reply = self.get(alias_key(self.prefix))
        return reply.decode() if reply is not None else None

    def get(self, key: str) -> bytes | None:
        with translated(f"GET {key}"):
            return self.client.get(key)

    def set(self, key: str, value: bytes, ttl_s: int) -> None:
        with translated(f"SET {key}"):
            self.client.set(key, value, ex=ttl_s)

    def manifest(self, version: str) -> Manifest | None:
        """The manifest of ``version``, or None when it is absent (expired or never written)."""
        key = manifest_key(self.prefix, version)
        with translated(f"HGETALL {key}"):
            raw = self.client.hgetall(key)
        return Manifest.from_fields(raw) if raw else None

    def write_manifest(self, manifest: Manifest) -> None:
        key = manifest_key(self.prefix, manifest.version)
        with translated(f"writing manifest {key}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key, mapping=manifest.to_fields())
            pipe.expire(key, manifest.ttl_s)
            pipe.execute()

    def switch_alias(self, version: str, force: bool = False) -> str:
        """Atomically point the alias at ``version``; returns what it points at afterwards."""
        key = alias_key(self.prefix)
        with translated(f"switching {key}"):
            reply = self.client.eval(SWITCH_ALIAS, 1, key, version, "1" if force else "0")
        return reply.decode()

    def memory(self) -> dict[str, dict[str, int]]:
        """``INFO memory`` numbers of each master (``host:port``)."""
        out = {}
        for name, client in self.masters():
            with translated(f"INFO memory on {name}"):
                info = client.info("memory")
            out[name] = {k: v for k, v in info.items() if isinstance(v, int)}
        return out

    def hash_limits(self) -> HashLimits:
        """The strictest listpack thresholds among the masters (defaults when unreadable)."""
        entries, values = [], []
        for name, client in self.masters():
            try:
                with translated(f"CONFIG GET on {name}"):
                    config = client.config_get("hash-max-listpack-*")
            except CacheError:
                return HashLimits()
            entries.append(int(config.get("hash-max-listpack-entries", DEFAULT_MAX_ENTRIES)))
            values.append(int(config.get("hash-max-listpack-value", DEFAULT_MAX_VALUE)))
        return HashLimits(min(entries), min(values), "CONFIG GET on every master")

    def eviction_policy(self) -> str:
        """``maxmemory-policy`` of the first master ('unknown' when CONFIG is not permitted)."""
        name, client = self.masters()[0]
        try:
            with translated(f"CONFIG GET on {name}"):
                reply = client.config_get("maxmemory-policy")
        except CacheError:
            return "unknown"
        return reply.get("maxmemory-policy", "unknown")

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> CacheServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
