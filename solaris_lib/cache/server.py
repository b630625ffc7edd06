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
from solaris_lib.cache.format import (
    RETAINED_TTL_S,
    Manifest,
    alias_key,
    failover_key,
    manifest_key,
)
from solaris_lib.cache.memory import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_VALUE, HashLimits

# Moves the alias (KEYS[1]) to ARGV[1] unless it names a later interval (the first 16
# characters of a version id are its interval key) and ARGV[2] is not "1"; the version it named
# becomes the failover (KEYS[2], same slot). Returns {alias, failover} afterwards.
SWITCH_ALIAS = """
local current = redis.call('GET', KEYS[1])
if current and ARGV[2] ~= '1' and string.sub(current, 1, 16) > string.sub(ARGV[1], 1, 16) then
  return {current, redis.call('GET', KEYS[2])}
end
if current ~= ARGV[1] then
  if current then redis.call('SET', KEYS[2], current) end
  redis.call('SET', KEYS[1], ARGV[1])
end
return {ARGV[1], redis.call('GET', KEYS[2])}
"""
# Writes a manifest's fields (ARGV[2] ...) unless it is complete already (a served version's
# manifest is never rewritten: a second or zombie publisher of the same interval cannot set it
# back to "writing"); gives it the TTL ARGV[1] without ever shortening it. Returns 1 when
# written, 0 when the manifest was complete.
WRITE_MANIFEST = """
if redis.call('HMGET', KEYS[1], 'state')[1] == 'complete' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1], 'NX')
redis.call('EXPIRE', KEYS[1], ARGV[1], 'GT')
return 1
"""
# Sets a manifest's state to complete (its fields ARGV[3] ...; a manifest complete already keeps
# its own) and its TTL to ARGV[1]: the seconds left of the TTL its publisher's keys got, counted
# from before its first key was written, so the manifest never outlives a key of the version (a
# rerun that finds it complete can trust the keys are there). A retained manifest (no TTL, or a
# TTL above ARGV[2], half the ten years retain gives a served or failover version, far above any
# ttl_s) keeps its TTL.
COMPLETE_MANIFEST = """
local ttl = redis.call('TTL', KEYS[1])
if redis.call('HMGET', KEYS[1], 'state')[1] ~= 'complete' then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
if ttl == -2 or (ttl >= 0 and ttl <= tonumber(ARGV[2])) then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return 1
"""
EVICTING = ("allkeys-", "volatile-")  # maxmemory-policy prefixes that may drop cached pairs


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
        """SET ``key`` (keeping its TTL), then give it ``ttl_s`` unless it has a longer one
        (a retained version's chunk is rewritten with the same bytes, never shortened)."""
        with translated(f"SET {key}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.set(key, value, keepttl=True)
            pipe.expire(key, ttl_s, nx=True)
            pipe.expire(key, ttl_s, gt=True)
            pipe.execute()

    def manifest(self, version: str) -> Manifest | None:
        """The manifest of ``version``, or None when it is absent (expired or never written)."""
        key = manifest_key(self.prefix, version)
        with translated(f"HGETALL {key}"):
            raw = self.client.hgetall(key)
        return Manifest.from_fields(raw) if raw else None

    def write_manifest(self, manifest: Manifest) -> bool:
        """Write ``manifest`` unless the version's manifest is complete already (then False:
        another publisher finished this version; its manifest is never rewritten)."""
        key = manifest_key(self.prefix, manifest.version)
        fields = [part for pair in manifest.to_fields().items() for part in pair]
        with translated(f"writing manifest {key}"):
            return bool(self.client.eval(WRITE_MANIFEST, 1, key, manifest.ttl_s, *fields))

    def complete_manifest(self, manifest: Manifest, left_s: int) -> None:
        """Mark ``manifest`` complete (a manifest complete already keeps its fields) and give it
        ``left_s`` (>= 1), the seconds left of its keys' TTL; a retained manifest (a TTL above
        half :data:`RETAINED_TTL_S`, or none) keeps its own."""
        key = manifest_key(self.prefix, manifest.version)
        fields = [part for pair in manifest.to_fields().items() for part in pair]
        with translated(f"completing manifest {key}"):
            self.client.eval(COMPLETE_MANIFEST, 1, key, left_s, RETAINED_TTL_S // 2, *fields)

    def switch_alias(self, version: str, force: bool = False) -> tuple[str, str | None]:
        """Atomically point the alias at ``version`` (the version it named becomes the
        failover); returns ``(alias, failover)`` afterwards."""
        keys = (alias_key(self.prefix), failover_key(self.prefix))
        with translated(f"switching {keys[0]}"):
            alias, failover = self.client.eval(SWITCH_ALIAS, 2, *keys, version,
                                               "1" if force else "0")
        return alias.decode(), failover.decode() if failover else None

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

    def eviction_policy(self) -> dict[str, str]:
        """``maxmemory_policy`` of each master, from ``INFO memory`` (no CONFIG needed)."""
        return {name: str(info.get("maxmemory_policy", "unknown"))
                for name, info in self._info("memory").items()}

    def keys_per_master(self) -> dict[str, int]:
        """Keys of every database of each master (``INFO keyspace``): what a retain pass scans."""
        return {name: sum(int(db.get("keys", 0)) for db in info.values() if isinstance(db, dict))
                for name, info in self._info("keyspace").items()}

    def evicted_keys(self) -> int:
        """Keys evicted so far, summed over the masters (``INFO stats``)."""
        return sum(int(info.get("evicted_keys", 0)) for info in self._info("stats").values())

    def _info(self, section: str) -> dict[str, dict]:
        out = {}
        for name, client in self.masters():
            with translated(f"INFO {section} on {name}"):
                out[name] = client.info(section)
        return out

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> CacheServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
