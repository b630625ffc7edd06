"""Which cache version the client serves, read in the background only, whatever Redis holds.

* :func:`pick_version`: the alias's version (``P:alias``) when its manifest is usable, else the
  failover version (``P:failover``: the one served before, kept by the publisher until a later
  one is verified) when that one is; every reply is checked (an alias that is not a version id,
  a manifest of random bytes or of the wrong type, another dimension) and an unusable one is a
  :class:`CacheFormatError`, never another exception;
* :func:`with_tables`: the version with its fallback tables (the item -> cluster table, the item
  priors) read with size limits: a table larger than ``max_table_bytes`` (from the manifest's
  counts, before anything is read) or malformed is left out and its level not served (counted).

:class:`Served` is what lookups read: one immutable object, swapped whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
from redis.exceptions import ResponseError

from solaris_lib.cache.errors import CacheFormatError, CacheProtocolError
from solaris_lib.cache.format import (
    CLUSTER_KEY,
    Codec,
    Manifest,
    alias_key,
    bucket_of,
    check_version,
    failover_key,
    manifest_key,
    user_key_head,
)
from solaris_lib.client._clusters import (
    ItemPriors,
    load_item_clusters,
    load_item_priors,
    table_bytes,
)
from solaris_lib.client._options import ClientOptions
from solaris_lib.client._stats import Counters
from solaris_lib.client._transport import Transport
from solaris_lib.fallback import ItemClusters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """The version lookups read: swapped as a whole by the background thread.
    ``tables_pending``: the version has fallback tables not loaded yet (served without them
    meanwhile)."""

    version: str
    model_version: str
    codec: Codec
    key_head: str
    buckets: int
    clusters: ItemClusters | None = None
    priors: ItemPriors | None = None
    tables_pending: bool = False

    def commands(self, tag: str, items: np.ndarray) -> tuple[list[tuple], np.ndarray | None]:
        """The lookup's HMGETs (one per bucket that ``items`` (n,) fall in, in bucket order)
        and the order of the items in their replies (None: the request's order)."""
        head = f"{self.key_head}{tag}}}:"
        if self.buckets == 1:
            return [("HMGET", f"{head}0", *items.tolist())], None
        parts = bucket_of(items, self.buckets)
        order = np.argsort(parts, kind="stable")
        ids = items[order].tolist()
        commands, start = [], 0
        for bucket, count in enumerate(np.bincount(parts, minlength=self.buckets).tolist()):
            if count:
                commands.append(("HMGET", f"{head}{bucket}", *ids[start : start + count]))
                start += count
        return commands, order

    def cluster_command(self, tag: str, clusters: np.ndarray) -> tuple:
        return ("HMGET", f"{self.key_head}{tag}}}:{CLUSTER_KEY}", *clusters.tolist())


def served_without_tables(manifest: Manifest, prefix: str) -> Served:
    """``manifest``'s version, its fallback tables (if any) still to load."""
    pending = manifest.has_clusters or manifest.has_priors
    return Served(manifest.version, manifest.model_version, manifest.value_codec,
                  user_key_head(prefix, manifest.version), manifest.buckets,
                  tables_pending=pending)


def _version_of(reply: object, key: str) -> str | None:
    """The version id a ``GET`` of ``key`` answered (None: no key)."""
    if reply is None:
        return None
    if isinstance(reply, ResponseError):
        raise CacheProtocolError(f"GET {key} answered {reply}")
    try:
        return check_version(reply.decode("ascii"))
    except (AttributeError, UnicodeDecodeError) as exc:
        raise CacheFormatError(f"{key} holds {reply!r:.80}, not a version id") from exc


def read_manifest(transport: Transport, options: ClientOptions, version: str) -> Manifest:
    """``version``'s manifest if a reader may serve it: complete, of format 2, naming this
    version, of the expected dimension; else :class:`CacheFormatError`."""
    key = manifest_key(options.key_prefix, version)
    raw = transport.background(key, [("HGETALL", key)])[0]
    if isinstance(raw, ResponseError):
        raise CacheFormatError(f"HGETALL {key} answered {raw}")
    manifest = Manifest.from_fields(raw)
    expected = options.expected_dim
    if (manifest.version != version or not manifest.complete
            or (expected is not None and manifest.dim != expected)):
        raise CacheFormatError(
            f"refusing version {version}: manifest of {manifest.version}, state "
            f"{manifest.state}, dim {manifest.dim} (expected {expected or 'any'})")
    return manifest


def pick_version(transport: Transport, options: ClientOptions, current: str | None,
                 counters: Counters) -> Manifest | None:
    """The manifest of the version to serve now, or None to keep serving ``current``.

    The alias's version first; when its manifest is unusable, the failover version's. Raises
    :class:`CacheFormatError` (or :class:`CacheError` for I/O) when neither can be served and
    ``current`` is neither of them.
    """
    keys = [alias_key(options.key_prefix), failover_key(options.key_prefix)]
    replies = transport.background(keys[0], [("GET", key) for key in keys])
    counters.add(alias_refreshes=1)
    alias = _version_of(replies[0], keys[0])
    try:
        failover = _version_of(replies[1], keys[1])
    except (CacheFormatError, CacheProtocolError) as exc:
        log.debug("failover version unreadable: %s", exc)
        failover = None
    if alias is None or alias == current:
        return None
    try:
        return read_manifest(transport, options, alias)
    except CacheFormatError as problem:
        if failover is None or failover == alias:
            raise
        if failover == current:
            log.debug("alias version %s unusable (%s): keeping failover %s", alias, problem,
                      failover)
            return None
        try:
            manifest = read_manifest(transport, options, failover)
        except CacheFormatError:
            raise problem from None
        counters.add(failovers=1)
        log.warning("alias version %s unusable (%s): serving the failover version %s", alias,
                    problem, failover)
        return manifest


def with_tables(transport: Transport, options: ClientOptions, manifest: Manifest,
                counters: Counters) -> Served:
    """``manifest``'s version with the fallback tables that fit ``options.max_table_bytes``
    and are well formed; each level left out is counted (``tables_too_large`` or
    ``cluster_table_errors``) and logged. An I/O failure raises :class:`CacheError`."""
    served = served_without_tables(manifest, options.key_prefix)
    budget = options.max_table_bytes
    tables: dict[str, object] = {}
    for level, size in table_bytes(manifest).items():
        if size > budget:
            counters.add(tables_too_large=1)
            log.warning("version %s served without its %s level: its table takes %d bytes, "
                        "more than max_table_bytes (%d left)", manifest.version, level, size,
                        budget)
            continue
        try:
            if level == "cluster":
                tables[level] = load_item_clusters(transport, options.key_prefix, manifest)
            else:
                tables[level], dropped = load_item_priors(transport, options.key_prefix,
                                                          manifest)
                counters.add(corrupt_values=dropped)
        except CacheFormatError as exc:
            counters.add(cluster_table_errors=1)
            log.warning("version %s served without its %s level: %s", manifest.version, level,
                        exc)
            continue
        budget -= size
    return replace(served, clusters=tables.get("cluster"), priors=tables.get("item"),
                   tables_pending=False)
