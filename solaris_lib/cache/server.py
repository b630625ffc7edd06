"""Administrative access to the cache: the alias, manifests, memory and settings of each master.

Used by the publisher's driver and the ``solaris cache-info`` command, never on the lookup
path. Every call has a generous deadline and raises :class:`CacheError` subclasses, so that a
publish fails loudly (and before its alias switch) when the server misbehaves.
"""

from __future__ import annotations

import time

from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheError, CacheProtocolError
from solaris_lib.cache.format import Manifest, alias_key, manifest_key
from solaris_lib.cache.memory import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_VALUE, HashLimits
from solaris_lib.cache.nodes import NodePool, hash_tag, make_router
from solaris_lib.cache.resp import ReplyError, pack_command

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
        self.timeout_s = timeout_s
        self.router = make_router(self.endpoint)
        self.router.refresh(self._deadline())

    def _deadline(self) -> float:
        return time.perf_counter() + self.timeout_s

    def command(self, key: str, *args: bytes | str | int) -> object:
        """Run one command on the node owning ``key``; an error reply raises."""
        reply = self.router.execute(hash_tag(key), pack_command(*args), 1, self._deadline())[0]
        if isinstance(reply, ReplyError):
            raise CacheProtocolError(f"{args[0]} {key}: {reply}")
        return reply

    def masters(self) -> list[NodePool]:
        return self.router.pools()

    def on_master(self, pool: NodePool, *args: bytes | str | int) -> object:
        reply = pool.request(pack_command(*args), 1, self._deadline())[0]
        if isinstance(reply, ReplyError):
            raise CacheProtocolError(f"{args[0]} on {pool.address}: {reply}")
        return reply

    def served_version(self) -> str | None:
        reply = self.command(alias_key(self.prefix), "GET", alias_key(self.prefix))
        return reply.decode() if reply is not None else None

    def manifest(self, version: str) -> Manifest | None:
        """The manifest of ``version``, or None when it is absent (expired or never written)."""
        key = manifest_key(self.prefix, version)
        raw = self.command(key, "HGETALL", key)
        if not raw:
            return None
        return Manifest.from_fields(dict(zip(raw[::2], raw[1::2], strict=True)))

    def write_manifest(self, manifest: Manifest) -> None:
        key = manifest_key(self.prefix, manifest.version)
        flat = [part for pair in manifest.to_fields().items() for part in pair]
        payload = pack_command("HSET", key, *flat) + pack_command("EXPIRE", key, manifest.ttl_s)
        replies = self.router.execute(hash_tag(key), payload, 2, self._deadline())
        errors = [r for r in replies if isinstance(r, ReplyError)]
        if errors:
            raise CacheProtocolError(f"writing manifest {key}: {errors[0]}")

    def switch_alias(self, version: str, force: bool = False) -> str:
        """Atomically point the alias at ``version``; returns what it points at afterwards."""
        key = alias_key(self.prefix)
        reply = self.command(key, "EVAL", SWITCH_ALIAS, 1, key, version, "1" if force else "0")
        return reply.decode()

    def memory(self) -> dict[tuple[str, int], dict[str, int]]:
        """``INFO memory`` numbers of each master."""
        return {pool.address: _info_numbers(self.on_master(pool, "INFO", "memory").decode())
                for pool in self.masters()}

    def hash_limits(self) -> HashLimits:
        """The strictest listpack thresholds among the masters (defaults when unreadable)."""
        entries, values = [], []
        for pool in self.masters():
            try:
                reply = self.on_master(pool, "CONFIG", "GET", "hash-max-listpack-*")
            except CacheError:
                return HashLimits()
            config = {k.decode(): int(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}
            entries.append(config.get("hash-max-listpack-entries", DEFAULT_MAX_ENTRIES))
            values.append(config.get("hash-max-listpack-value", DEFAULT_MAX_VALUE))
        return HashLimits(min(entries), min(values), "CONFIG GET on every master")

    def eviction_policy(self) -> str:
        """``maxmemory-policy`` of the first master ('unknown' when CONFIG is not permitted)."""
        try:
            reply = self.on_master(self.masters()[0], "CONFIG", "GET", "maxmemory-policy")
        except CacheError:
            return "unknown"
        return reply[1].decode() if reply else "unknown"

    def close(self) -> None:
        self.router.close()

    def __enter__(self) -> CacheServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _info_numbers(text: str) -> dict[str, int]:
    """The integer fields of an INFO section."""
    numbers = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if value.strip().lstrip("-").isdigit():
            numbers[name] = int(value)
    return numbers
