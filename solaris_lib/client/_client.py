"""The online lookup client: one pipelined round trip per lookup, never an exception into the
ranker.

Request path of :meth:`SolarisClient.lookup` (one network round trip)::

    served version (cached) -> the items' buckets -> one HMGET per bucket hash of the user
    P:e:<version>:{user}:<b> [+ HMGET P:e:<version>:{user}:c cluster...] in one pipeline
    -> decode -> (embeddings (n, dim) float32, hit (n,), level (n,)) ; sample misses
    onto a queue

Every key of a lookup shares the user's hash tag, so the pipeline goes to one master. With a
version that has the hierarchical fallback level, the pipeline also asks the user's cluster
hash for the distinct clusters of the items (the item -> cluster table is held in memory,
loaded with the version by the background thread); an exact miss whose cluster has a value
gets it with level ``CLUSTER`` (``hit`` stays False). A version with the ITEM level also has
an item-prior table (loaded in the background with the item -> cluster table): a row still
missing after that takes its item's prior with level ``ITEM``, from memory.

A background thread does everything else: re-reads the alias every ``refresh_interval_s`` and
loads a new version's manifest (and its tables) before switching to it (one immutable object
swapped at once, so a lookup reads one version only), probes masters whose circuit breaker is
open, reloads the cluster slot map when it went stale, and writes sampled misses to the
``P:misses`` stream. Every command goes through the client's :class:`Transport`.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Sequence

import numpy as np
from redis.exceptions import ResponseError

from solaris_lib.cache.errors import (
    CacheError,
    CacheProtocolError,
    CacheTimeoutError,
    CacheUnavailableError,
)
from solaris_lib.cache.format import Manifest, misses_key
from solaris_lib.client._breaker import BreakerState, CircuitBreaker
from solaris_lib.client._clusters import fallback_levels
from solaris_lib.client._misses import MissSampler, xadd_commands
from solaris_lib.client._options import ClientOptions
from solaris_lib.client._result import LookupResult, all_misses
from solaris_lib.client._stats import ClientStats, Counters
from solaris_lib.client._transport import RedisTransport, Transport
from solaris_lib.client._versions import (
    Served,
    pick_version,
    served_without_tables,
    with_tables,
)

log = logging.getLogger(__name__)
_DEFAULTS = ClientOptions()


class SolarisClient:
    """Reads cached (user, item) embeddings from Redis; build it with :meth:`from_url`.

    Thread-safe: share one client between request threads. Use it as a context manager or call
    :meth:`close`.
    """

    def __init__(self, transport: Transport, options: ClientOptions | None = None) -> None:
        """A client over ``transport`` (:class:`RedisTransport` from :meth:`from_url`, or a
        :class:`MockTransport` in unit tests); call :meth:`start` before the first lookup."""
        options = options or ClientOptions()
        self._options = options
        self._transport = transport
        self._counters = Counters()
        self._misses = MissSampler(options.miss_sample_rate, options.miss_queue_size,
                                   self._counters)
        self._breakers: dict[tuple[str, int], BreakerState] = {}
        self._fallback = options.fallback_vector
        self._served: Served | None = None
        self._lock = threading.Lock()
        self._wanted: Manifest | None = None  # a version whose tables are being loaded
        self._loader: threading.Thread | None = None
        self._closed = threading.Event()
        self._next_refresh = 0.0
        self._bug_logged = False
        self._thread = threading.Thread(target=self._background, name="solaris-client",
                                        daemon=True)

    @classmethod
    def from_url(
        cls, url: str, *,
        key_prefix: str = _DEFAULTS.key_prefix,
        timeout_ms: float = _DEFAULTS.timeout_ms,
        dim: int | None = None,
        fallback: Sequence[float] | np.ndarray | None = None,
        refresh_interval_s: float = _DEFAULTS.refresh_interval_s,
        background_timeout_ms: float = _DEFAULTS.background_timeout_ms,
        breaker: CircuitBreaker = _DEFAULTS.breaker,
        miss_sample_rate: float = _DEFAULTS.miss_sample_rate,
        miss_queue_size: int = _DEFAULTS.miss_queue_size,
        miss_stream_maxlen: int = _DEFAULTS.miss_stream_maxlen,
        max_table_bytes: int = _DEFAULTS.max_table_bytes,
        transport: Transport | None = None,
    ) -> SolarisClient:
        """Connect to the cache at ``url`` (the forms: :mod:`solaris_lib.cache.endpoint`).

        The options are :class:`ClientOptions`' (see there); ``transport`` replaces the
        redis-py transport of ``url`` (e.g. a :class:`MockTransport`). The served version is
        loaded before this returns when the server answers (its fallback tables are waited
        for up to ``background_timeout_ms``, then load in the background); when it does not,
        or holds anything unusable, the client starts anyway, answers misses and keeps trying
        in the background. Whatever the server holds, this returns within a few
        ``background_timeout_ms``. Raises only :class:`CacheConfigError`, for a bad URL or
        option.
        """
        options = ClientOptions.build(
            key_prefix=key_prefix, timeout_ms=timeout_ms, dim=dim, fallback=fallback,
            refresh_interval_s=refresh_interval_s, background_timeout_ms=background_timeout_ms,
            breaker=breaker, miss_sample_rate=miss_sample_rate, miss_queue_size=miss_queue_size,
            miss_stream_maxlen=miss_stream_maxlen, max_table_bytes=max_table_bytes)
        if transport is None:
            transport = RedisTransport.from_url(url, options.timeout_ms,
                                                options.background_timeout_ms)
        return cls(transport, options).start()

    def start(self) -> SolarisClient:
        """Load the served version (when the server answers) and start the background
        thread; returns the client."""
        try:
            self._maintain(initial=True)
        except Exception:  # noqa: BLE001 - never raise into the caller; counted, logged
            self._counters.add(refresh_errors=1)
            log.exception("cache client start: loading the served version failed")
        self._wait_for_tables(self._options.background_timeout_ms / 1000.0)
        self._thread.start()
        return self

    # -- the request path -----------------------------------------------------------------

    def lookup(self, user_id: int, item_ids: Sequence[int] | np.ndarray) -> LookupResult:
        """Embeddings of ``item_ids`` (n,) for ``user_id``: one round trip, no I/O exceptions.

        Raises TypeError only for arguments that are not integers (a caller bug).
        """
        started = time.perf_counter()
        items = _item_array(item_ids)
        user = _user_int(user_id)
        try:
            return self._lookup(user, items, started)
        except Exception:  # noqa: BLE001 - the contract: never an exception into the ranker
            if not self._bug_logged:
                self._bug_logged = True
                log.exception("lookup failed unexpectedly; answering misses (logged once)")
            return self._miss_all(items, started, "server", self._served, errors=1,
                                  server_errors=1)

    def _lookup(self, user_id: int, items: np.ndarray, started: float) -> LookupResult:
        served = self._served
        if served is None or self._closed.is_set():
            reason = "closed" if self._closed.is_set() else "no_version"
            return self._miss_all(items, started, reason)
        if not len(items):
            return all_misses(0, served.codec.dim, None, served.version, served.model_version, None)
        tag = str(int(user_id))
        try:
            breaker = self._breaker(self._transport.node(tag))
        except CacheError as exc:  # no slot map yet
            return self._failed(items, started, served, None, exc)
        if breaker.open:
            return self._miss_all(items, started, "circuit_open", served, short_circuited=1)
        commands, order = served.commands(tag, items)
        if served.clusters is not None:
            clusters, distinct = served.clusters.fields(items)
            if len(distinct):  # an HMGET without fields is an error reply
                commands.append(served.cluster_command(tag, distinct))
        try:
            replies = self._transport.lookup(tag, commands)
            exact: list = []
            for reply in replies:
                if type(reply) is not list:
                    if str(reply).startswith("WRONGTYPE"):
                        breaker.record_success()  # the node answered: a bad key, not node
                        return self._miss_all(items, started, "server", served, errors=1,
                                              server_errors=1)
                    raise CacheProtocolError(f"HMGET answered {reply!r}")
                exact += reply
            n = len(items)
            if len(exact) != n + (len(distinct) if served.clusters is not None else 0):
                raise CacheProtocolError(f"HMGETs answered {len(exact)} values")
            embeddings, hit, corrupt = served.codec.decode(exact[:n], self._fallback, order)
        except CacheError as exc:
            return self._failed(items, started, served, breaker, exc)
        breaker.record_success()
        hits = int(np.count_nonzero(hit))
        fields = (clusters, distinct, exact[n:]) if served.clusters is not None else None
        level, cluster_rows, item_rows, bad = fallback_levels(served.codec, embeddings, hit,
                                                              items, fields, served.priors)
        corrupt += bad
        if hits < n:
            self._misses.offer(user_id, items, hit)
        self._counters.record_lookup(n, hits, (time.perf_counter() - started) * 1e6,
                                     corrupt_values=corrupt, cluster_hits=cluster_rows,
                                     item_hits=item_rows)
        return LookupResult(embeddings, hit, level, served.version, served.model_version)

    def _breaker(self, node: str) -> BreakerState:
        state = self._breakers.get(node)
        if state is None:
            state = self._breakers.setdefault(node, BreakerState(self._options.breaker))
        return state

    def _failed(self, items: np.ndarray, started: float, served: Served,
                breaker: BreakerState | None, exc: CacheError) -> LookupResult:
        kind = ("timeout" if isinstance(exc, CacheTimeoutError) else
                "connection" if isinstance(exc, CacheUnavailableError) else "server")
        counter = {"timeout": "timeouts", "connection": "connection_errors"}.get(kind,
                                                                                 "server_errors")
        opened = breaker.record_failure() if breaker is not None else False
        if opened or breaker is None:
            self._transport.mark_stale()  # a failover moves slots: reload the map
        if opened:
            log.warning("cache node unhealthy (%s); answering misses until it recovers", exc)
            self._misses.wake()
        return self._miss_all(items, started, kind, served, errors=1, breaker_opens=int(opened),
                              **{counter: 1})

    def _miss_all(self, items: np.ndarray, started: float, error: str,
                  served: Served | None = None, **counts: int) -> LookupResult:
        """Every row a miss (``error`` says why); rows whose item has a prior in memory (the
        served version's ITEM level) still get it: no round trip is needed for those."""
        dim = served.codec.dim if served else (self._options.expected_dim or 0)
        result = all_misses(len(items), dim, self._fallback, served and served.version,
                            served and served.model_version, error)
        if error == "no_version":
            counts["no_version"] = 1
        if served is not None and served.priors is not None:
            level, _, counts["item_hits"], _ = fallback_levels(
                served.codec, result.embeddings, result.hit, items, priors=served.priors)
            result.level[:] = level
        self._counters.record_lookup(len(items), 0, (time.perf_counter() - started) * 1e6,
                                     **counts)
        return result

    # -- state the caller can read ---------------------------------------------------------

    @property
    def version(self) -> str | None:
        """The cache version lookups read now (None before the first one is loaded)."""
        served = self._served
        return served.version if served else None

    @property
    def model_version(self) -> str | None:
        served = self._served
        return served.model_version if served else None

    def stats(self, reset: bool = False) -> ClientStats:
        """Counters since creation (or the last ``reset=True``), latency percentiles in us."""
        return self._counters.snapshot(reset)

    def refresh(self) -> str | None:
        """Re-read the alias now (operators, tests); unlike lookups this raises CacheError."""
        self._refresh_alias()
        self._wait_for_tables(None)
        return self.version

    def close(self) -> None:
        """Stop the background thread (dropping unsent misses, counted) and close connections."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._misses.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._wait_for_tables(1.0)
        self._counters.add(misses_dropped=self._misses.pending())
        self._transport.close()

    def __enter__(self) -> SolarisClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- background maintenance -----------------------------------------------------------

    def _background(self) -> None:
        while not self._closed.is_set():
            wait = max(0.0, min(self._next_refresh, self._next_probe()) - time.monotonic())
            entries = self._misses.wait(wait)
            if self._closed.is_set():
                return
            try:
                if entries:
                    self._write_misses(entries)
                self._maintain()
            except Exception:  # noqa: BLE001 - a bug must not stop alias refreshes for good
                self._counters.add(refresh_errors=1)
                log.exception("cache client maintenance failed; retrying")
                self._closed.wait(self._options.refresh_interval_s)

    def _maintain(self, initial: bool = False) -> None:
        """Probe open breakers, reload a stale slot map, re-read the alias when due."""
        self._probe_nodes()
        now = time.monotonic()
        if now < self._next_refresh and not self._transport.stale:
            return
        self._next_refresh = now + self._options.refresh_interval_s
        try:
            if self._transport.stale:
                self._transport.refresh()
            self._refresh_alias()
        except CacheError as exc:
            self._counters.add(refresh_errors=1)
            log.log(logging.WARNING if initial else logging.DEBUG, "cache refresh failed: %s", exc)

    def _next_probe(self) -> float:
        times = [b.probe_at for b in list(self._breakers.values()) if b.open]
        return min(times, default=float("inf"))

    def _probe_nodes(self) -> None:
        for node, breaker in list(self._breakers.items()):
            if not breaker.probe_due():
                continue
            try:
                if node not in self._transport.masters():
                    raise CacheUnavailableError(f"{node} owns no slots now")
                self._transport.ping(node)
            except CacheError as exc:
                breaker.probe_failed()
                # a replica may have taken the node's slots since the last reload: reload the
                # map again, or the node's users would short-circuit for good
                self._transport.mark_stale()
                log.debug("probe of %s failed: %s", node, exc)
                continue
            breaker.record_success()
            log.info("cache node %s answers again", node)

    def _refresh_alias(self) -> None:
        """Switch to the version to serve now (:func:`pick_version`). A version without
        fallback tables is served at once; one with tables once they are loaded by the loader
        thread (the first version at once, its levels following when loaded)."""
        with self._lock:
            served = self._served
        manifest = pick_version(self._transport, self._options, served and served.version,
                                self._counters)
        with self._lock:
            if manifest is not None:
                if not (manifest.has_clusters or manifest.has_priors):
                    self._install(served_without_tables(manifest, self._options.key_prefix))
                    self._wanted = None
                    return
                if self._served is None:
                    self._install(served_without_tables(manifest, self._options.key_prefix))
                if self._wanted is None or self._wanted.version != manifest.version:
                    self._wanted = manifest  # the same version's load in flight stands
            elif self._wanted is not None and self._served is not None and \
                    self._wanted.version != self._served.version:
                self._wanted = None  # the alias came back to the served version
            if self._wanted is not None and not (self._loader and self._loader.is_alive()):
                self._loader = threading.Thread(target=self._load_tables, args=(self._wanted,),
                                                name="solaris-client-tables", daemon=True)
                self._loader.start()

    def _load_tables(self, manifest: Manifest) -> None:
        """Loader thread: ``manifest``'s version with its tables, installed unless the client
        moved on meanwhile; an I/O failure leaves it for the next refresh to retry."""
        try:
            served = with_tables(self._transport, self._options, manifest, self._counters)
        except CacheError as exc:
            self._counters.add(refresh_errors=1)
            log.debug("loading the fallback tables of %s failed: %s", manifest.version, exc)
            return
        except Exception:  # noqa: BLE001 - a bug must not kill the client; counted, logged
            self._counters.add(refresh_errors=1)
            log.exception("loading the fallback tables of %s failed", manifest.version)
            return
        with self._lock:
            wanted = self._wanted
            if wanted is not None and wanted.version == manifest.version and \
                    not self._closed.is_set():
                self._install(served)
                self._wanted = None

    def _install(self, served: Served) -> None:
        """Serve ``served`` from the next lookup on (caller holds the lock)."""
        previous, self._served = self._served, served
        if previous is None or previous.version != served.version:
            self._counters.add(version_switches=1)
            log.info("serving cache version %s (model %s, dim %d%s)", served.version,
                     served.model_version, served.codec.dim,
                     ", fallback tables loading" if served.tables_pending else "")

    def _wait_for_tables(self, timeout_s: float | None) -> None:
        loader = self._loader
        if loader is not None and loader.is_alive():
            loader.join(timeout_s)

    def _write_misses(self, entries: list) -> None:
        key = misses_key(self._options.key_prefix)
        try:
            replies = self._transport.background(
                key, xadd_commands(key, entries, self._options.miss_stream_maxlen))
        except CacheError as exc:
            self._counters.add(misses_dropped=len(entries))
            log.debug("writing %d miss samples failed: %s", len(entries), exc)
            return
        failed = sum(isinstance(r, ResponseError) for r in replies)
        self._counters.add(misses_written=len(entries) - failed, misses_dropped=failed)


def _user_int(user_id: int) -> int:
    """``user_id`` as an int; a float or a string is a TypeError (a caller bug: ``3.7`` or
    ``1e17 + 1`` would read another user's keys)."""
    try:
        return operator.index(user_id)
    except TypeError:
        raise TypeError(f"user_id must be an integer, got {type(user_id).__name__} "
                        f"{user_id!r}") from None


def _item_array(item_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """``item_ids`` as a 1-D int64 array; non-integer input is a TypeError (a caller bug)."""
    items = np.asarray(item_ids)
    if items.size == 0:
        return items.astype(np.int64).reshape(0)
    if items.ndim != 1 or items.dtype.kind not in "iu":
        raise TypeError(f"item_ids must be a 1-D sequence of integers, got {items.dtype} "
                        f"with shape {items.shape}")
    return items.astype(np.int64, copy=False)
