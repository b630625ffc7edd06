"""Does the publisher's Redis user have the permissions a publish needs? Checked first.

A publish reads an interval's embeddings with Spark before its first write to Redis; an ACL
user without write permission would otherwise fail minutes later, at the manifest. So
:func:`check_publisher_access` asks every master, before anything else, whether the URL's
user may run each command the publisher sends on keys of its prefix. It does so with one
``EVAL`` per master whose script calls ``redis.acl_check_cmd`` (Redis 7) for each command:
nothing is written. The keys named (``P:probe:{tag}`` and ``P:probe:{tag}:s``, ``tag``
chosen so that they live on that master, in a slot not being migrated) are never created. A
refusal raises
:class:`PublishPermissionError` naming the user, the command and the key; nothing was
written and the served version is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from redis.exceptions import AskError, NoPermissionError

from solaris_lib.cache.connection import translated
from solaris_lib.cache.errors import CacheProtocolError, PublishPermissionError

log = logging.getLogger(__name__)
NEEDED = ("+ping +info +get +set +hset +hgetall +hmget +hlen +expire +ttl +scan +eval "
          "(+select where the URL names a database other than 0; +cluster|slots +asking on "
          "Redis Cluster; no CONFIG)")
TAGS_PER_MASTER = 8  # probe tags tried per master: a slot being migrated answers -ASK
# KEYS[1]: a hash like a user's or a manifest; KEYS[2]: a string like the alias; ARGV[1]: "1"
# on a cluster (ASKING is checked too). Returns nil when every command is allowed, else
# {command, key} of the first refused one.
CHECK_SCRIPT = """
local h, s = KEYS[1], KEYS[2]
local checks = {
  {'INFO', 'memory'}, {'HSET', h, '1', 'v'}, {'EXPIRE', h, '60', 'NX'}, {'HLEN', h},
  {'HMGET', h, '1'}, {'HGETALL', h}, {'TTL', h}, {'GET', s}, {'SET', s, 'v'}, {'SCAN', '0'},
}
if ARGV[1] == '1' then table.insert(checks, {'ASKING'}) end
for _, c in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(c)) then return {c[1], c[2] or '-'} end
end
return nil
"""


def probe_key(prefix: str, tag: str) -> str:
    """The (never created) hash key named in one master's check."""
    return f"{prefix}:probe:{{{tag}}}"


def master_tags(masters: list[str], node_for_tag: Callable[[str], str],
                per_master: int = 1) -> dict[str, list[str]]:
    """``per_master`` decimal hash tags per master (``host:port``): the smallest it owns."""
    found: dict[str, list[str]] = {name: [] for name in masters}
    number = 0
    while any(len(tags) < per_master for tags in found.values()) and number < 1_000_000:
        tags = found.setdefault(node_for_tag(str(number)), [])
        if len(tags) < per_master:
            tags.append(str(number))
        number += 1
    return found


def check_publisher_access(server) -> None:
    """Raise :class:`PublishPermissionError` unless the URL's user may run every publisher
    command on the prefix's keys on every master (``server``: a connected CacheServer)."""
    user = server.endpoint.username or "default"
    nodes = server.nodes()
    clients = dict(server.masters())
    for name, tags in master_tags(list(clients), nodes.node_for_tag, TAGS_PER_MASTER).items():
        refused = _check_master(clients[name], name, server.prefix, tags, nodes.cluster)
        if refused is not None:
            raise PublishPermissionError(
                f"Redis user {user!r} at {name} may not run {refused[0]} on {refused[1]}: "
                f"{refused[2]}. The publisher needs {NEEDED} on keys ~{server.prefix}:*. "
                f"Nothing was written; the served version is unchanged.")
    log.info("Redis user %r may run every publisher command on %s:*", user, server.prefix)


def _check_master(client, name: str, prefix: str, tags: list[str],
                  cluster: bool) -> tuple | None:
    """``(command, key, why)`` of the first command the user may not run on master ``name``,
    probed on the first of ``tags`` whose slot is not being migrated; None when all may run
    (or when the master cannot tell: logged)."""
    for tag in tags:
        key = probe_key(prefix, tag)
        try:
            with translated(f"checking permissions on {name}"):
                reply = client.eval(CHECK_SCRIPT, 2, key, f"{key}:s", "1" if cluster else "0")
        except CacheProtocolError as exc:
            if isinstance(exc.__cause__, AskError):  # the slot is moving: another tag
                continue
            if "acl_check_cmd" in str(exc):
                log.warning("Redis at %s cannot check ACLs from a script (Redis < 7?): "
                            "permissions not checked before the publish", name)
                return None
            denied = isinstance(exc.__cause__, NoPermissionError)  # redis-py drops the code
            return ("EVAL", key, f"NOPERM {exc.__cause__}" if denied else str(exc))
        if reply is None:
            return None
        return (reply[0].decode(), reply[1].decode(), "refused by the user's ACL")
    log.warning("Redis at %s: the slots of probe tags %s are all being migrated: "
                "permissions not checked before the publish", name, tags)
    return None
