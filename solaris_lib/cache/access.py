"""Does the publisher's Redis user have the permissions a publish needs? Checked first.

A publish reads an interval's embeddings with Spark before its first write to Redis; an ACL
user without write permission would otherwise fail minutes later, at the manifest. So
:func:`check_publisher_access` runs, on every master, each command the publisher sends, on
keys of its own prefix: ``INFO memory``; ``HSET``/``EXPIRE``/``HLEN``/``HMGET``/``HGETALL`` on
the probe hash ``P:probe:{tag}``; ``GET`` and an ``EVAL`` that does ``GET`` + ``SET`` (the
alias switch's commands) on the probe string ``P:probe:{tag}:s``. Probe keys expire after
:data:`PROBE_TTL_S` seconds and are never read by anything else (docs/cache-format.md).
A refusal raises :class:`PublishPermissionError` naming the user, the command and the key;
nothing else was written and the served version is unchanged.
"""

from __future__ import annotations

import logging
import time

from solaris_lib.cache.errors import PublishPermissionError
from solaris_lib.cache.resp import ReplyError, pack_command

log = logging.getLogger(__name__)
PROBE_TTL_S = 10
NEEDED = ("+ping +info +get +set +hset +hgetall +hmget +hlen +expire +eval "
          "(+config|get optional; +cluster|slots on Redis Cluster)")
_PROBE_SCRIPT = ("redis.call('GET', KEYS[1]) "
                 "return redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])")


def probe_key(prefix: str, tag: str) -> str:
    """The probe hash of one master (``tag`` hashes to a slot that master owns)."""
    return f"{prefix}:probe:{{{tag}}}"


def probe_commands(prefix: str, tag: str) -> list[tuple]:
    """The commands of one master's probe, in order (each one the publisher sends)."""
    key = probe_key(prefix, tag)
    text = f"{key}:s"
    return [
        ("INFO", "memory"),
        ("HSET", key, "probe", "1"),
        ("EXPIRE", key, PROBE_TTL_S),
        ("HLEN", key),
        ("HMGET", key, "probe"),
        ("HGETALL", key),
        ("EVAL", _PROBE_SCRIPT, 1, text, "1", PROBE_TTL_S),
        ("GET", text),
    ]


def master_tags(router) -> list[tuple[object, str]]:
    """(pool, tag) with one decimal tag per master, the smallest that hashes to it."""
    pools = {id(p): p for p in router.pools()}
    found: dict[int, tuple[object, str]] = {}
    number = 0
    while len(found) < len(pools) and number < 1_000_000:
        pool = router.pool_for_tag(str(number).encode())
        found.setdefault(id(pool), (pool, str(number)))
        number += 1
    return list(found.values())


def check_publisher_access(server, timeout_s: float = 10.0) -> None:
    """Raise :class:`PublishPermissionError` unless the URL's user may run every publisher
    command on the prefix's keys on every master (``server``: a connected CacheServer)."""
    user = server.endpoint.username or "default"
    for pool, tag in master_tags(server.router):
        commands = probe_commands(server.prefix, tag)
        payload = b"".join(pack_command(*command) for command in commands)
        replies = pool.request(payload, len(commands), time.perf_counter() + timeout_s)
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, ReplyError):
                where = f"{pool.address[0]}:{pool.address[1]}"
                key = command[3] if command[0] == "EVAL" else command[1]
                raise PublishPermissionError(
                    f"Redis user {user!r} at {where} may not run {command[0]} on {key}: {reply}. "
                    f"The publisher needs {NEEDED} on keys ~{server.prefix}:*. Nothing was "
                    f"written; the served version is unchanged.")
    log.info("Redis user %r may run every publisher command on %s:*", user, server.prefix)
