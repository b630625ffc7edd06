"""The client's logic over the in-memory transport (the real one is tested against Redis in
tests/integration/cache/test_client.py): values from the spec, failures, breakers, levels."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from solaris_lib.cache.format import (
    item_clusters_key,
    item_priors_key,
    pack_item_clusters,
    pack_item_priors,
)
from solaris_lib.client import (
    Backoff,
    CacheConnectionError,
    CacheFormatError,
    CacheTimeoutError,
    CircuitBreaker,
    InMemoryRedis,
    Level,
    MockTransport,
    SolarisClient,
)
from tests.cachespec import bucket, put_version

V1, V2 = "20260105T100000Z-aaaaaaaaaa", "20260105T110000Z-bbbbbbbbbb"


def _client(handler, **options) -> SolarisClient:
    options.setdefault("miss_sample_rate", 0.0)
    options.setdefault("refresh_interval_s", 3600)
    return SolarisClient.from_url("redis://unused", transport=MockTransport(handler), **options)


@pytest.fixture
def store():
    return InMemoryRedis()


def _put(store, version=V1, data=None, **kwargs):
    put_version(lambda *c: store(c), "p", version, data or {7: {1: [1, 2], 2: [0.5, -4]}},
                kwargs.pop("dim", 2), **kwargs)


def test_hits_misses_and_levels_in_request_order(store):
    _put(store)
    with _client(store, key_prefix="p") as client:
        result = client.lookup(7, [2, 99, 1])
        stats = client.stats()
    assert result.embeddings.tolist() == [[0.5, -4.0], [0.0, 0.0], [1.0, 2.0]]
    assert result.hit.tolist() == [True, False, True]
    assert result.level.tolist() == [Level.EXACT, Level.MISS, Level.EXACT]
    assert (result.version, result.model_version, result.error) == (V1, "m1", None)
    assert (stats.lookups, stats.hits, stats.misses, stats.errors) == (1, 2, 1, 0)


def test_one_pipeline_of_one_hmget_per_bucket_and_values_back_in_order(store):
    rng = np.random.default_rng(3)
    items = rng.choice(10**9, 300, replace=False).tolist()
    values = {i: rng.standard_normal(4).astype("<f2").astype(float).tolist() for i in items}
    _put(store, data={5: values}, dim=4, buckets=8)
    asked = rng.permutation(items)[:200].tolist() + [10**12]
    pipelines = []

    class Counting(MockTransport):
        def lookup(self, tag, commands):
            pipelines.append(tag)
            return super().lookup(tag, commands)

    with SolarisClient.from_url("redis://unused", transport=Counting(store), key_prefix="p",
                                miss_sample_rate=0.0) as client:
        store.commands.clear()
        result = client.lookup(5, asked)
    assert pipelines == ["5"]  # one pipeline: one round trip
    hmgets = [c for c in store.commands if c[0] == "HMGET"]
    assert sorted(c[1] for c in hmgets) == sorted(
        {f"p:e:{V1}:{{5}}:{bucket(i, 8)}" for i in asked})
    assert result.hit.tolist() == [True] * 200 + [False]
    assert result.embeddings[:200].tolist() == [values[i] for i in asked[:200]]


def test_a_failing_node_costs_three_timeouts_then_short_circuits(store):
    _put(store)
    broken = {"on": False}

    def handler(command):
        if broken["on"] and command[0] in ("HMGET", "PING"):
            raise CacheTimeoutError("slow")
        return store(command)

    breaker = CircuitBreaker(failure_threshold=3, backoff=Backoff(initial_ms=60_000, max_ms=60_000))
    with _client(handler, key_prefix="p", breaker=breaker) as client:
        broken["on"] = True
        errors = [client.lookup(7, [1]).error for _ in range(5)]
        stats = client.stats()
    assert errors == ["timeout"] * 3 + ["circuit_open"] * 2
    assert (stats.timeouts, stats.short_circuited, stats.breaker_opens) == (3, 2, 1)


def test_a_probe_closes_the_breaker_once_the_node_answers(store):
    _put(store)
    broken = {"on": True}

    def handler(command):
        if broken["on"] and command[0] in ("HMGET", "PING"):
            raise CacheTimeoutError("slow")
        return store(command)

    breaker = CircuitBreaker(failure_threshold=1, backoff=Backoff(initial_ms=1, max_ms=1))
    with _client(handler, key_prefix="p", breaker=breaker) as client:
        assert client.lookup(7, [1]).error == "timeout"
        broken["on"] = False
        for _ in range(500):
            if client.lookup(7, [1]).error is None:
                break
            client._maintain()
        assert client.lookup(7, [1]).hit.tolist() == [True]


class FailoverTransport(MockTransport):
    """Two masters as Redis Cluster shows them to a client: the slot map it holds (reloaded by
    ``refresh``) and the cluster's own, which a failover changes later."""

    def __init__(self, handler) -> None:
        super().__init__(handler)
        self.dead: set[str] = set()
        self.owner = self.held = "a:1"  # the master of every slot: now, and in the map held
        self.reloads = 0

    def node(self, tag):
        return self.held

    def lookup(self, tag, commands):
        if self.held in self.dead:
            raise CacheConnectionError(f"{self.held}: connection refused")
        return super().lookup(tag, commands)

    def ping(self, node):
        if node in self.dead:
            raise CacheConnectionError(f"{node}: connection refused")

    def masters(self):
        return [self.held]

    def mark_stale(self):
        self._stale = True

    def refresh(self):
        self.held, self._stale = self.owner, False
        self.reloads += 1


def test_a_failover_after_the_first_map_reload_is_found_by_the_next_probe(store):
    transport = FailoverTransport(store)
    _put(store)
    breaker = CircuitBreaker(failure_threshold=1, backoff=Backoff(initial_ms=1, max_ms=1))
    with SolarisClient.from_url("redis://unused", transport=transport, key_prefix="p",
                                breaker=breaker, miss_sample_rate=0.0,
                                refresh_interval_s=3600) as client:
        transport.dead.add("a:1")
        assert client.lookup(7, [1]).error == "connection"  # the breaker of a:1 opens
        client._maintain()  # the map reloads before the replica is promoted: still a:1
        assert client.lookup(7, [1]).error == "circuit_open"
        transport.owner = "b:2"  # the replica b:2 takes a:1's slots
        for _ in range(500):
            time.sleep(0.002)  # past the probe's backoff
            client._maintain()  # a probe of a:1 fails: the map must reload again
            if transport.held == "b:2":
                break
        result = client.lookup(7, [1])
    assert result.error is None and result.hit.tolist() == [True]


def test_a_key_of_the_wrong_type_answers_misses_without_blaming_the_node(store):
    _put(store)
    store(("SET", f"p:e:{V1}:{{9}}:{bucket(1, 4)}", b"x"))
    with _client(store, key_prefix="p", breaker=CircuitBreaker(failure_threshold=1)) as client:
        bad = [client.lookup(9, [1]) for _ in range(3)]
        good = client.lookup(7, [1])
        stats = client.stats()
    assert [r.error for r in bad] == ["server"] * 3 and good.hit.tolist() == [True]
    assert (stats.server_errors, stats.breaker_opens) == (3, 0)


def test_values_of_the_wrong_length_are_counted_misses(store):
    _put(store)
    store(("HSET", f"p:e:{V1}:{{7}}:{bucket(5, 4)}", "5", b"\x00\x3c\x00"))
    with _client(store, key_prefix="p") as client:
        result = client.lookup(7, [5, 1])
        assert result.hit.tolist() == [False, True]
        assert client.stats().corrupt_values == 1


def test_versions_of_another_dimension_or_not_complete_are_refused(store):
    _put(store, version=V1, state="writing")
    with _client(store, key_prefix="p") as client:
        assert client.version is None
        assert client.lookup(7, [1]).error == "no_version"
        _put(store, version=V2, dim=3, data={7: {1: [1, 2, 3]}})
        assert client.refresh() == V2 and client.lookup(7, [1]).hit.tolist() == [True]
    with _client(store, key_prefix="p", dim=2) as expecting_two:
        with pytest.raises(CacheFormatError, match="dim 3 .expected 2"):
            expecting_two.refresh()
        assert expecting_two.lookup(7, [1]).embeddings.shape == (1, 2)


def test_sampled_misses_reach_the_stream(store):
    _put(store)
    with _client(store, key_prefix="p", miss_sample_rate=1.0) as client:
        client.lookup(7, [1, 55, 66])
        for _ in range(200):
            if store.streams.get(b"p:misses"):
                break
            client._misses.wake()
            time.sleep(0.01)
    (entry,) = store.streams[b"p:misses"]
    assert (entry[b"user"], entry[b"items"]) == (b"7", b"55,66")


def test_cluster_and_item_levels_fill_the_misses_from_memory_and_one_pipeline(store):
    clusters = {"fallback": "cluster", "clusters": "2", "cluster_pairs": "1",
                "item_clusters": "3", "item_cluster_chunks": "1", "item_priors": "1",
                "item_prior_chunks": "1"}
    _put(store, data={7: {1: [1, 2]}}, clusters={7: {0: [3, 3]}}, extra=clusters)
    (table,) = pack_item_clusters(np.array([1, 2, 3]), np.array([0, 0, 1]))
    prior = np.array([[4.0, 4.0]], "<f2").view(np.uint8)
    (priors,) = pack_item_priors(np.array([3]), prior)
    store(("SET", item_clusters_key("p", V1, 0), table))
    store(("SET", item_priors_key("p", V1, 0), priors))
    with _client(store, key_prefix="p") as client:
        store.commands.clear()
        result = client.lookup(7, [1, 2, 3, 4])
        stats = client.stats()
    assert result.level.tolist() == [Level.EXACT, Level.CLUSTER, Level.ITEM, Level.MISS]
    assert result.embeddings.tolist() == [[1, 2], [3, 3], [4, 4], [0, 0]]
    assert ("HMGET", f"p:e:{V1}:{{7}}:c", 0, 1) in store.commands
    assert (stats.hits, stats.cluster_hits, stats.item_hits) == (1, 1, 1)


CLUSTER_FIELDS = {"fallback": "cluster", "clusters": "2", "cluster_pairs": "1",
                  "item_clusters": "3", "item_cluster_chunks": "1"}


def _put_with_clusters(store, version=V1, value=(1, 2), alias=True):
    _put(store, version=version, data={7: {1: list(value)}}, clusters={7: {0: [3, 3]}},
         extra=CLUSTER_FIELDS, alias=alias)
    (table,) = pack_item_clusters(np.array([1, 2, 3]), np.array([0, 0, 1]))
    store(("SET", item_clusters_key("p", version, 0), table))


def test_items_without_a_cluster_send_no_empty_cluster_hmget(store):
    _put_with_clusters(store)
    with _client(store, key_prefix="p") as client:
        store.commands.clear()
        result = client.lookup(7, [4, 5])  # in no cluster (new items): no cluster to ask for
        stats = client.stats()
    assert result.error is None and result.level.tolist() == [Level.MISS, Level.MISS]
    assert not [c for c in store.commands if c[0] == "HMGET" and len(c) == 2]
    assert stats.errors == 0 and stats.server_errors == 0


def test_a_user_id_that_is_not_an_integer_is_a_type_error(store):
    _put(store)
    with _client(store, key_prefix="p") as client:
        assert client.lookup(np.int64(7), [1]).hit.tolist() == [True]
        for bad in (7.0, 7.9, "7"):
            with pytest.raises(TypeError, match="user_id must be an integer"):
                client.lookup(bad, [1])


class GatedTables:
    """``store``'s handler whose fallback-table reads wait for ``gate`` (a slow table load)."""

    def __init__(self, store) -> None:
        self.store, self.gate = store, threading.Event()

    def __call__(self, command):
        if command[0] in ("GET", "GETRANGE") and ":h:" in str(command[1]):
            assert self.gate.wait(10)
        return self.store(command)


def test_a_table_load_longer_than_the_refresh_interval_still_switches(store):
    _put(store, data={7: {1: [1, 2]}})
    handler = GatedTables(store)
    with _client(handler, key_prefix="p") as client:
        _put_with_clusters(store, version=V2, value=(5, 5))
        for _ in range(3):  # refreshes while V2's tables are still loading
            client._refresh_alias()
        handler.gate.set()
        client._wait_for_tables(5)
        assert client.version == V2 and client.lookup(7, [2]).level.tolist() == [Level.CLUSTER]


def test_a_load_the_alias_moved_away_from_is_not_installed(store):
    _put(store, data={7: {1: [1, 2]}})
    handler = GatedTables(store)
    with _client(handler, key_prefix="p") as client:
        _put_with_clusters(store, version=V2, value=(5, 5))
        client._refresh_alias()  # V2's tables loading
        store(("SET", "p:alias", V1))  # rolled back before they loaded
        client._refresh_alias()
        handler.gate.set()
        client._wait_for_tables(5)
        assert client.version == V1


def test_non_finite_values_are_counted_misses_never_hits(store):
    _put(store, data={7: {1: [1, 2]}})
    for item, halves in ((2, [0x7C00, 0]), (3, [0, 0x7E00])):  # +inf, nan
        store(("HSET", f"p:e:{V1}:{{7}}:{bucket(item, 4)}", str(item),
               np.asarray(halves, "<u2").tobytes()))
    with _client(store, key_prefix="p", fallback=[9, 9]) as client:
        result = client.lookup(7, [1, 2, 3])
        stats = client.stats()
    assert result.hit.tolist() == [True, False, False]
    assert result.embeddings.tolist() == [[1, 2], [9, 9], [9, 9]]
    assert stats.corrupt_values == 2


def test_an_unusable_alias_version_falls_back_to_the_failover_version(store):
    _put(store, version=V1)
    store(("SET", "p:failover:{p:alias}", V1))
    store(("SET", "p:alias", V2))  # V2 has no manifest (expired, or a writer died)
    with _client(store, key_prefix="p") as client:
        assert client.version == V1 and client.lookup(7, [1]).hit.tolist() == [True]
        assert client.stats().failovers == 1
        _put(store, version=V2, data={7: {1: [5, 5]}})
        assert client.refresh() == V2


def test_a_table_larger_than_the_limit_is_never_read_and_its_level_is_left_out(store):
    huge = 10**9  # items: 12 GB of table, 3815 chunks
    fields = {"fallback": "cluster", "clusters": "2", "cluster_pairs": "1",
              "item_clusters": str(huge), "item_cluster_chunks": str(-(-huge // 2**18))}
    _put(store, data={7: {1: [1, 2]}}, extra=fields)
    with _client(store, key_prefix="p") as client:
        result = client.lookup(7, [1, 2])
        stats = client.stats()
    assert result.hit.tolist() == [True, False] and client.version == V1
    assert stats.tables_too_large == 1
    assert not [c for c in store.commands if c[0] in ("GET", "GETRANGE") and ":h:" in c[1]]


def test_a_chunk_count_other_than_the_formats_serves_the_version_without_the_level(store):
    fields = {"fallback": "cluster", "clusters": "2", "cluster_pairs": "1",
              "item_clusters": "3", "item_cluster_chunks": "1000000"}
    _put(store, data={7: {1: [1, 2]}}, extra=fields)
    with _client(store, key_prefix="p") as client:
        assert client.lookup(7, [1]).hit.tolist() == [True]
        assert client.stats().cluster_table_errors == 1
