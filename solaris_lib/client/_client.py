"""The online lookup client: one HMGET per lookup, never an exception into the ranker.

Request path of :meth:`SolarisClient.lookup` (one network round trip)::

    served version (cached) -> key P:e:<version>:{user} -> HMGET key item... [c<cluster>...]
    -> decode -> (embeddings (n, dim) float32, hit (n,), level (n,)) ; sample misses
    onto a queue

With a version that has the hierarchical fallback level, the same HMGET also asks for the
distinct ``c<cluster>`` fields of the items (the item -> cluster table is held in memory,
loaded with the version by the background thread); an exact miss whose cluster has a value
gets it with level ``CLUSTER`` (``hit`` stays False). A version with the ITEM level also has
an item-prior table (the FM's embedding of each live item for an empty history, loaded in the
background with the item -> cluster table): a row still missing after that takes its item's
prior with level ``ITEM``, from memory.

A background thread does everything else: re-reads the alias every ``refresh_interval_s`` and
loads a new version's manifest (and its item -> cluster table) before switching to it (one immutable object swapped at once,
so a lookup reads one version only), probes nodes whose circuit breaker is open, reloads the
cluster slot map when it went stale, and writes sampled misses to the ``P:misses`` stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import (
    CacheError,
    CacheFormatError,
    CacheProtocolError,
    CacheTimeoutError,
    CacheUnavailableError,
)
from solaris_lib.cache.format import (
    Codec,
    Manifest,
    alias_key,
    data_key_head,
    manifest_key,
    misses_key,
)
from solaris_lib.cache.nodes import NodePool, hash_tag, make_router
from solaris_lib.cache.resp import ReplyError, pack_command, pack_hmget
from solaris_lib.client._breaker import BreakerState
from solaris_lib.client._clusters import (
    ItemClusters,
    ItemPriors,
    load_item_clusters,
    load_item_priors,
    merge_clusters,
)
from solaris_lib.client._misses import MissSampler, xadd_payload
from solaris_lib.client._options import ClientOptions
from solaris_lib.client._result import LookupResult, all_misses
from solaris_lib.client._stats import ClientStats, Counters

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Served:
    """The version lookups read: swapped as a whole by the background thread."""

    version: str
    model_version: str
    codec: Codec
    key_head: str
    clusters: ItemClusters | None = None
    priors: ItemPriors | None = None


class SolarisClient:
    """Reads cached (user, item) embeddings from Redis; build it with :meth:`from_url`.

    Thread-safe: share one client between request threads. Use it as a context manager or call
    :meth:`close`.
    """

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._options = options
        self._router = make_router(endpoint)
        self._counters = Counters()
        self._misses = MissSampler(options.miss_sample_rate, options.miss_queue_size,
                                   self._counters)
        self._breakers: dict[tuple[str, int], BreakerState] = {}
        self._fallback = options.fallback_vector
        self._served: _Served | None = None
        self._closed = threading.Event()
        self._next_refresh = 0.0
        self._thread = threading.Thread(target=self._background, name="solaris-client",
                                        daemon=True)

    @classmethod
    def from_url(cls, url: str, **options: object) -> SolarisClient:
        """Connect to the cache at ``url`` (see :mod:`solaris_lib.cache.endpoint` for the forms).

        Keyword-only options are those of :class:`ClientOptions` (``timeout_ms``, ``key_prefix``,
        ``dim``, ``fallback``, ``breaker``, ...). The served version is loaded before this returns
        when the server answers; when it does not, the client starts anyway, answers misses and
        keeps trying in the background. Raises :class:`CacheConfigError` for a bad URL or option.
        """
        client = cls(Endpoint.from_url(url), ClientOptions.build(**options))
        client._maintain(initial=True)
        client._thread.start()
        return client

    # -- the request path -----------------------------------------------------------------

    def lookup(self, user_id: int, item_ids: Sequence[int] | np.ndarray) -> LookupResult:
        """Embeddings of ``item_ids`` (n,) for ``user_id``: one round trip, no I/O exceptions.

        Raises TypeError only for arguments that are not integers (a caller bug).
        """
        started = time.perf_counter()
        items = _item_array(item_ids)
        served = self._served
        if served is None or self._closed.is_set():
            reason = "closed" if self._closed.is_set() else "no_version"
            return self._miss_all(items, started, reason)
        if not len(items):
            return all_misses(0, served.codec.dim, None, served.version, served.model_version, None)
        tag = str(int(user_id))
        try:
            breaker = self._breaker(self._router.pool_for_tag(tag.encode()))
        except CacheError as exc:  # a cluster slot with no known master yet
            return self._failed(items, started, served, None, exc)
        if breaker.open:
            return self._miss_all(items, started, "circuit_open", served, short_circuited=1)
        deadline = started + self._options.timeout_ms / 1000.0
        fields = list(map(str, items.tolist()))
        if served.clusters is not None:
            clusters, distinct, cluster_fields = served.clusters.fields(items)
            fields += cluster_fields
        payload = pack_hmget(served.key_head + tag + "}", fields)
        try:
            reply = self._router.execute(tag.encode(), payload, 1, deadline)[0]
            if isinstance(reply, ReplyError) and str(reply).startswith("WRONGTYPE"):
                breaker.record_success()  # the node answered: one bad key, not a bad node
                return self._miss_all(items, started, "server", served, errors=1,
                                      server_errors=1)
            if isinstance(reply, ReplyError) or not isinstance(reply, list):
                raise CacheProtocolError(f"HMGET answered {reply!r}")
            n = len(items)
            exact = reply if served.clusters is None else reply[:n]
            embeddings, hit, corrupt = served.codec.decode(exact, self._fallback)
        except CacheError as exc:
            return self._failed(items, started, served, breaker, exc)
        breaker.record_success()
        hits = int(np.count_nonzero(hit))
        level, cluster_rows, item_rows = hit.astype(np.int8), 0, 0
        if hits < n and served.clusters is not None:
            level, cluster_rows, bad = merge_clusters(served.codec, embeddings, hit, clusters,
                                                      distinct, reply[n:])
            corrupt += bad
        if hits + cluster_rows < n and served.priors is not None:
            item_rows = served.priors.fill(items, embeddings, level)
        if hits < n:
            self._misses.offer(user_id, items, hit)
        self._counters.record_lookup(n, hits, (time.perf_counter() - started) * 1e6,
                                     corrupt_values=corrupt, cluster_hits=cluster_rows,
                                     item_hits=item_rows)
        return LookupResult(embeddings, hit, level, served.version, served.model_version)

    def _breaker(self, pool: NodePool) -> BreakerState:
        state = self._breakers.get(pool.address)
        if state is None:
            state = self._breakers.setdefault(pool.address, BreakerState(self._options.breaker))
        return state

    def _failed(self, items: np.ndarray, started: float, served: _Served,
                breaker: BreakerState | None, exc: CacheError) -> LookupResult:
        kind = ("timeout" if isinstance(exc, CacheTimeoutError) else
                "connection" if isinstance(exc, CacheUnavailableError) else "server")
        counter = {"timeout": "timeouts", "connection": "connection_errors"}.get(kind,
                                                                                 "server_errors")
        opened = breaker.record_failure() if breaker is not None else False
        if opened or breaker is None:
            self._router.stale = self._router.cluster  # a failover moves slots: reload the map
        if opened:
            log.warning("cache node unhealthy (%s); answering misses until it recovers", exc)
            self._misses.wake()
        return self._miss_all(items, started, kind, served, errors=1, breaker_opens=int(opened),
                              **{counter: 1})

    def _miss_all(self, items: np.ndarray, started: float, error: str,
                  served: _Served | None = None, **counts: int) -> LookupResult:
        """Every row a miss (``error`` says why); rows whose item has a prior in memory (the
        served version's ITEM level) still get it: no round trip is needed for those."""
        dim = served.codec.dim if served else (self._options.expected_dim or 0)
        result = all_misses(len(items), dim, self._fallback, served and served.version,
                            served and served.model_version, error)
        if error == "no_version":
            counts["no_version"] = 1
        if served is not None and served.priors is not None:
            counts["item_hits"] = served.priors.fill(items, result.embeddings, result.level)
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
        self._refresh_alias(time.perf_counter() + self._options.background_timeout_ms / 1000.0)
        return self.version

    def close(self) -> None:
        """Stop the background thread (dropping unsent misses, counted) and close connections."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._misses.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._counters.add(misses_dropped=self._misses.pending())
        self._router.close()

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
        budget = self._options.background_timeout_ms / 1000.0
        self._probe_nodes(budget)
        now = time.monotonic()
        if now < self._next_refresh and not self._router.stale:
            return
        self._next_refresh = now + self._options.refresh_interval_s
        try:
            if self._router.stale:
                self._router.refresh(time.perf_counter() + budget)
            self._refresh_alias(time.perf_counter() + budget)
        except CacheError as exc:
            self._counters.add(refresh_errors=1)
            log.log(logging.WARNING if initial else logging.DEBUG, "cache refresh failed: %s", exc)

    def _next_probe(self) -> float:
        times = [b.probe_at for b in list(self._breakers.values()) if b.open]
        return min(times, default=float("inf"))

    def _probe_nodes(self, budget: float) -> None:
        for address, breaker in list(self._breakers.items()):
            if not breaker.probe_due():
                continue
            pool = next((p for p in self._router.pools() if p.address == address), None)
            try:
                if pool is None:
                    raise CacheUnavailableError(f"{address} owns no slots now")
                reply = pool.request(pack_command("PING"), 1, time.perf_counter() + budget)[0]
                if isinstance(reply, ReplyError):
                    raise CacheProtocolError(f"PING answered {reply}")
            except CacheError as exc:
                breaker.probe_failed()
                log.debug("probe of %s failed: %s", address, exc)
                continue
            breaker.record_success()
            log.info("cache node %s:%s answers again", *address)

    def _refresh_alias(self, deadline: float) -> None:
        prefix = self._options.key_prefix
        alias = alias_key(prefix)
        reply = self._router.execute(hash_tag(alias), pack_command("GET", alias), 1, deadline)[0]
        self._counters.add(alias_refreshes=1)
        if isinstance(reply, ReplyError):
            raise CacheProtocolError(f"GET {alias} answered {reply}")
        if reply is None or (self._served and self._served.version == reply.decode()):
            return
        self._switch(reply.decode(), deadline)

    def _switch(self, version: str, deadline: float) -> None:
        key = manifest_key(self._options.key_prefix, version)
        raw = self._router.execute(hash_tag(key), pack_command("HGETALL", key), 1, deadline)[0]
        if isinstance(raw, ReplyError):
            raise CacheProtocolError(f"HGETALL {key} answered {raw}")
        manifest = Manifest.from_fields(dict(zip(raw[::2], raw[1::2], strict=True)))
        expected = self._options.expected_dim
        if not manifest.complete or (expected is not None and manifest.dim != expected):
            raise CacheFormatError(
                f"refusing version {version}: state {manifest.state}, dim {manifest.dim} "
                f"(expected {expected or 'any'})"
            )
        self._served = _Served(version, manifest.model_version, manifest.value_codec,
                               data_key_head(self._options.key_prefix, version),
                               self._item_clusters(manifest), self._item_priors(manifest))
        self._counters.add(version_switches=1)
        log.info("serving cache version %s (model %s, dim %d)", version, manifest.model_version,
                 manifest.dim)

    def _item_clusters(self, manifest: Manifest) -> ItemClusters | None:
        """The version's item -> cluster table (None without the CLUSTER level)."""
        if not manifest.has_clusters:
            return None
        return self._fallback_table(load_item_clusters, manifest, "cluster")

    def _item_priors(self, manifest: Manifest) -> ItemPriors | None:
        """The version's item-prior table (None without the ITEM level)."""
        if not manifest.has_priors:
            return None
        return self._fallback_table(load_item_priors, manifest, "item")

    def _fallback_table(self, load, manifest: Manifest, level: str):
        """``load``'s table of ``manifest``. A missing or malformed table serves the version
        without that level (counted, logged); an I/O error raises, so the switch is retried at
        the next refresh."""
        try:
            return load(self._router, self._options.key_prefix, manifest,
                        self._options.background_timeout_ms / 1000.0)
        except CacheFormatError as exc:
            self._counters.add(cluster_table_errors=1)
            log.warning("version %s served without its %s level: %s", manifest.version, level,
                        exc)
            return None

    def _write_misses(self, entries: list) -> None:
        key = misses_key(self._options.key_prefix)
        payload = xadd_payload(key, entries, self._options.miss_stream_maxlen)
        deadline = time.perf_counter() + self._options.background_timeout_ms / 1000.0
        try:
            replies = self._router.execute(hash_tag(key), payload, len(entries), deadline)
        except CacheError as exc:
            self._counters.add(misses_dropped=len(entries))
            log.debug("writing %d miss samples failed: %s", len(entries), exc)
            return
        failed = sum(isinstance(r, ReplyError) for r in replies)
        self._counters.add(misses_written=len(entries) - failed, misses_dropped=failed)


def _item_array(item_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """``item_ids`` as a 1-D int64 array; non-integer input is a TypeError (a caller bug)."""
    items = np.asarray(item_ids)
    if items.size == 0:
        return items.astype(np.int64).reshape(0)
    if items.ndim != 1 or items.dtype.kind not in "iu":
        raise TypeError(f"item_ids must be a 1-D sequence of integers, got {items.dtype} "
                        f"with shape {items.shape}")
    return items.astype(np.int64, copy=False)
