"""The failover tier: the served version and the failover version never expire; every other
version does, by its own TTL or, once retired, after a grace period.

A version's keys are written with its TTL (``ttl_s``), so a publish that dies leaves a partial
version that expires by itself. After a switch (and on every rerun of a publish, so a driver
killed between its switch and this pass is healed by the next run), :func:`retain` walks the
prefix's keys on every master (``SCAN MATCH P:*``, pages of :data:`PAGE` keys):

* keys of the served version (``P:alias``) and of the failover version (``P:failover:{..}``,
  the one served before it) get ``EXPIRE key RETAINED_TTL_S GT``: ten years, in effect never;
  ``GT`` leaves a key already retained unchanged;
* keys of any other version whose TTL is above ``ttl_ceiling`` (a version retained before, now
  retired) or that have none get ``EXPIRE key grace_s``: readers still on it (a client that
  has not refreshed yet) keep it for ``grace_s`` seconds. Keys with a shorter TTL (a version
  being written, or a failed one) are left to their own TTL, and so are those of a version
  whose manifest still says ``writing`` (another publisher's, with a longer TTL).

Another publisher may switch the alias during the pass (a rerun or backfill beside the DAG's
run): the served and failover versions are read again for each page, after its TTLs. A key
that a switch made meanwhile retained (its publisher's own pass, after its switch) has its long
TTL only once the alias names its version, so the page's read of the alias sees that version.

So during a pipeline outage the served version keeps answering for as long as the outage
lasts, and the version before it stays as the failover until a later one is verified and
switched to. The pass reads every key name of each master (SCAN is not limited to the prefix
by the server), about a second per million keys; the publisher's user needs ``+scan +ttl``
(and ``+asking`` on a cluster: a key in a slot being migrated to the master is reached after
``ASKING``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.exceptions import AskError, TryAgainError

from solaris_lib.cache.connection import translated
from solaris_lib.cache.errors import CacheFormatError
from solaris_lib.cache.format import (
    RETAINED_TTL_S,
    STATE_WRITING,
    alias_key,
    check_version,
    failover_key,
    version_in_key,
)

log = logging.getLogger(__name__)
PAGE = 1000  # keys per SCAN page (and per pipeline of EXPIREs)


@dataclass
class Retained:
    """What one pass did: the versions kept and the keys touched."""

    served: str | None
    failover: str | None
    retained_keys: int = 0
    retired_keys: int = 0
    scanned_keys: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def kept_versions(server) -> tuple[str | None, str | None]:
    """``(served, failover)`` version ids as the server names them now."""
    found = []
    for key in (alias_key(server.prefix), failover_key(server.prefix)):
        reply = server.get(key)
        try:
            found.append(check_version(reply.decode()) if reply is not None else None)
        except (UnicodeDecodeError, ValueError) as exc:
            log.warning("%s holds %r, not a version id (%s): ignored", key, reply, exc)
            found.append(None)
    return found[0], found[1]


def retain(server, grace_s: int, ttl_ceiling: int) -> Retained:
    """Keep the served and failover versions, retire the others (see the module docstring).
    ``server``: a connected :class:`~solaris_lib.cache.server.CacheServer`; ``ttl_ceiling``:
    the longest TTL a version being written can have (its ``ttl_s``)."""
    served, failover = kept_versions(server)
    done = Retained(served, failover)
    keep = {v for v in (served, failover) if v}
    writing: dict[str, bool] = {}  # version -> its manifest said writing (once per pass)
    for name, client in server.masters():
        with translated(f"retaining versions {sorted(keep)} on {name}"):
            for page in _pages(client, f"{server.prefix}:*"):
                _retain_page(server, client, page, keep, grace_s, ttl_ceiling, done, writing)
    log.info("retained %s (served) and %s (failover): %d keys kept, %d keys retiring in %d s "
             "(%d scanned)", served, failover, done.retained_keys, done.retired_keys, grace_s,
             done.scanned_keys)
    return done


def _pages(client, pattern: str):
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, match=pattern, count=PAGE)
        if keys:
            yield [key.decode(errors="replace") for key in keys]
        if cursor == 0:
            return


def _retain_page(server, client, keys: list[str], keep: set[str], grace_s: int,
                 ttl_ceiling: int, done: Retained, writing: dict[str, bool]) -> None:
    done.scanned_keys += len(keys)
    versions = [(key, version_in_key(key)) for key in keys]
    kept = [key for key, version in versions if version in keep]
    others = [key for key, version in versions if version and version not in keep]
    replies = _pipelined(server, client, [("EXPIRE", key, RETAINED_TTL_S, "GT") for key in kept]
                         + [("TTL", key) for key in others])
    done.retained_keys += len(kept)
    ttls = replies[len(kept):]
    retiring = [key for key, ttl in zip(others, ttls, strict=True)
                if ttl == -1 or ttl > max(ttl_ceiling, grace_s)]
    if retiring:  # read after the TTLs: a long TTL from a switch made meanwhile is seen here
        kept_now = {v for v in kept_versions(server) if v}
        retiring = [key for key in retiring if version_in_key(key) not in kept_now
                    and not _being_written(server, version_in_key(key), writing)]
    if retiring:
        _pipelined(server, client, [("EXPIRE", key, grace_s) for key in retiring])
        done.retired_keys += len(retiring)


def _pipelined(server, client, calls: list[tuple]) -> list:
    """The replies of ``calls`` (``(command, *arguments)``) sent in one pipeline to ``client``,
    a master that SCAN found their keys on. During a slot migration a key may answer a
    redirection: ``-MOVED`` from the master importing its slot (it serves it only after
    ``ASKING``), ``-ASK`` from the source once the key has moved, ``-MOVED`` from the old owner
    once the slot has: those calls go again, one by one, through the server's cluster client,
    which follows redirections (with ``ASKING``). Another error reply is raised."""
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.execute_command(*call)
    replies = pipe.execute(raise_on_error=False)
    for k, reply in enumerate(replies):
        if isinstance(reply, AskError | TryAgainError):  # MovedError is an AskError
            replies[k] = server.client.execute_command(*calls[k])
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _being_written(server, version: str, known: dict[str, bool]) -> bool:
    """True when ``version``'s manifest says ``writing`` (a publish in progress; an unreadable
    or absent manifest is no publish's). Read once per pass into ``known``: a version that
    completes meanwhile and is switched to is in the served set read for each page."""
    if version not in known:
        try:
            manifest = server.manifest(version)
        except CacheFormatError:
            manifest = None
        known[version] = manifest is not None and manifest.state == STATE_WRITING
    return known[version]
