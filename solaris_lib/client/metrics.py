"""A Prometheus collector for :class:`~solaris_lib.client.SolarisClient` (optional: needs
``prometheus_client``, the ``prometheus`` extra)::

    from prometheus_client import start_http_server
    from solaris_lib.client.metrics import register

    client = SolarisClient.from_url(url, timeout_ms=20)
    register(client)            # the default registry; name="..." labels several clients
    start_http_server(9108)     # or the ranker's own /metrics endpoint

The collector reads the client's counters at scrape time: the request path pays nothing for it.
Every name below is documented in docs/cache-client.md ("Metrics"), and a test scrapes a
client process for exactly that list (:data:`METRIC_NAMES`).

Latency comes from the client's 4 %-wide log buckets, summed into the Prometheus buckets of
:data:`LATENCY_BUCKETS_S`; a bucket's count is exact up to the one 4 % bucket that straddles
its bound.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from solaris_lib.client._client import SolarisClient
from solaris_lib.client._stats import _BOUNDS_US, ERROR_KINDS
from solaris_lib.errors import MissingDependencyError

try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as exc:  # pragma: no cover - exercised where the extra is missing
    raise MissingDependencyError("prometheus_client", "the client's Prometheus metrics") from exc

PREFIX = "solaris_client"
LATENCY_BUCKETS_S = (50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 750e-6, 1e-3, 2e-3, 5e-3, 10e-3,
                     20e-3, 50e-3, 100e-3, 1.0)
LEVELS = ("exact", "cluster", "item", "miss")  # where a pair's answer came from
# name (as exposed, counters with their _total suffix) -> help
METRIC_NAMES = {
    f"{PREFIX}_lookup_latency_seconds": "Latency of one lookup (one user, N items)",
    f"{PREFIX}_lookups_total": "Lookups answered",
    f"{PREFIX}_pairs_total": "Pairs answered, by the level that answered them",
    f"{PREFIX}_errors_total": "Failed lookups, by kind (timeout, connection, server, corrupt)",
    f"{PREFIX}_short_circuited_total": "Lookups answered with misses at once: breaker open",
    f"{PREFIX}_breaker_open": "1 while a node's circuit breaker is open",
    f"{PREFIX}_breaker_opens_total": "Times a node's circuit breaker opened",
    f"{PREFIX}_refresh_errors_total": "Failed reads of the alias, manifest or fallback tables",
    f"{PREFIX}_version_switches_total": "Switches to a newly published version",
    f"{PREFIX}_failovers_total": "Switches to the failover version (alias unusable)",
    f"{PREFIX}_misses_written_total": "Sampled misses written to the misses stream",
    f"{PREFIX}_misses_dropped_total": "Sampled misses dropped (queue full)",
    f"{PREFIX}_version_info": "1, labelled with the version and model version served",
}
_COUNTERS = {  # metric stem -> ClientStats field
    "lookups": "lookups", "short_circuited": "short_circuited",
    "breaker_opens": "breaker_opens", "refresh_errors": "refresh_errors",
    "version_switches": "version_switches", "failovers": "failovers",
    "misses_written": "misses_written", "misses_dropped": "misses_dropped",
}


class SolarisCollector(Collector):
    """Exposes one client's counters, latency histogram, breaker states and served version,
    labelled ``client=<name>``."""

    def __init__(self, client: SolarisClient, name: str = "default") -> None:
        self._client = client
        self._name = name

    def describe(self) -> list:
        return []  # collected at scrape time only (no metric is created at registration)

    def collect(self) -> Iterator:
        stats = self._client.stats()
        labels = ["client"]
        yield self._latency()
        for stem, field in _COUNTERS.items():
            family = CounterMetricFamily(f"{PREFIX}_{stem}", METRIC_NAMES[f"{PREFIX}_{stem}_total"],
                                         labels=labels)
            family.add_metric([self._name], getattr(stats, field))
            yield family
        yield self._pairs(stats)
        errors = CounterMetricFamily(f"{PREFIX}_errors", METRIC_NAMES[f"{PREFIX}_errors_total"],
                                     labels=["client", "kind"])
        for kind, field in zip(ERROR_KINDS, ("timeouts", "connection_errors", "server_errors",
                                             "corrupt_values"), strict=True):
            errors.add_metric([self._name, kind], getattr(stats, field))
        yield errors
        yield self._breakers()
        info = GaugeMetricFamily(f"{PREFIX}_version_info", METRIC_NAMES[f"{PREFIX}_version_info"],
                                 labels=["client", "version", "model_version"])
        info.add_metric([self._name, self._client.version or "", self._client.model_version or ""],
                        1 if self._client.version else 0)
        yield info

    def _pairs(self, stats) -> CounterMetricFamily:
        pairs = CounterMetricFamily(f"{PREFIX}_pairs", METRIC_NAMES[f"{PREFIX}_pairs_total"],
                                    labels=["client", "level"])
        fallback = stats.cluster_hits + stats.item_hits
        for level, count in zip(LEVELS, (stats.hits, stats.cluster_hits, stats.item_hits,
                                         stats.misses - fallback), strict=True):
            pairs.add_metric([self._name, level], count)
        return pairs

    def _breakers(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(f"{PREFIX}_breaker_open", METRIC_NAMES[f"{PREFIX}_breaker_open"],
                                   labels=["client", "node"])
        for node, state in sorted(self._client._breakers.items()):  # node: "host:port"
            family.add_metric([self._name, str(node)], 1 if state.open else 0)
        return family

    def _latency(self) -> HistogramMetricFamily:
        counters = self._client._counters
        with counters.lock:
            counts, total, sum_us = list(counters.latency.counts), counters.latency.total, \
                counters.latency.sum_us
        buckets, running, index = [], 0, 0
        for bound_s in LATENCY_BUCKETS_S:
            upto = bisect.bisect_right(_BOUNDS_US, bound_s * 1e6)  # 4 % buckets <= the bound
            running += sum(counts[index:upto])
            index = max(index, upto)
            buckets.append((repr(bound_s), running))
        buckets.append(("+Inf", total))
        family = HistogramMetricFamily(f"{PREFIX}_lookup_latency_seconds",
                                       METRIC_NAMES[f"{PREFIX}_lookup_latency_seconds"],
                                       labels=["client"])
        family.add_metric([self._name], buckets, sum_value=sum_us / 1e6)
        return family


def register(client: SolarisClient, registry: CollectorRegistry | None = None,
             name: str = "default") -> SolarisCollector:
    """Register a :class:`SolarisCollector` of ``client`` (label ``client=name``) in
    ``registry`` (Prometheus's default one when None) and return it."""
    collector = SolarisCollector(client, name)
    (registry or REGISTRY).register(collector)
    return collector
