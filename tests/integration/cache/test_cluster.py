"""A real 3-master Redis Cluster on loopback ports: publish, lookups, and slots that move."""

from __future__ import annotations

import signal

import numpy as np
import pytest
import redis
from redis.crc import key_slot

from solaris_lib.cache.format import RETAINED_TTL_S
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import Backoff, CircuitBreaker, SolarisClient
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    write_embeddings,
)
from tests.integration.cache.test_client import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def published(redis_cluster, spark, tmp_path_factory):
    """One version published into the cluster through Spark."""
    from solaris_lib.config import load_settings

    url, servers = redis_cluster
    settings = load_settings(data_root=str(tmp_path_factory.mktemp("cluster-data")),
                             redis_url=url, redis_key_prefix="solaris-cluster-test")
    table = embeddings_table(users=60, per_user=8, dim=16)
    write_embeddings(settings, table)
    report = publish(spark, settings, INTERVAL, PublishConfig())
    return url, servers, settings.redis_key_prefix, table, report


def test_publish_spreads_users_over_every_master(published):
    _, servers, prefix, _, report = published
    assert report.status == "published" and report.pairs == 480
    sizes = [redis.Redis(port=s.port).dbsize() for s in servers]
    # the users' bucket hashes, the manifest and the alias
    assert all(size > 0 for size in sizes) and sum(sizes) == report.keys + 2


def test_lookups_through_the_cluster_url(published):
    url, _, prefix, table, report = published
    with SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=1000) as client:
        assert client.version == report.version
        for (user, item), want in expected_vectors(table).items():
            result = client.lookup(user, [item, 10**12])
            assert result.hit.tolist() == [True, False]
            assert np.array_equal(result.embeddings[0], want)
        assert client.stats().errors == 0


def test_lookups_follow_a_slot_being_migrated_and_moved(published):
    url, servers, prefix, table, report = published
    user = int(table["user_id"][0].as_py())
    items = [i for (u, i) in expected_vectors(table) if u == user]
    slot = key_slot(str(user).encode())
    with SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=1000) as client:
        assert client.lookup(user, items).hit.all()
        source, target = _owner_and_other(servers, slot)
        _migrate(source, target, slot, settle=False)  # keys moved, slot still MIGRATING: ASK
        assert client.lookup(user, items).hit.all()
        _settle(servers, target, slot)  # the slot now belongs to the target: MOVED
        assert client.lookup(user, items).hit.all()
        assert client.lookup(user, items).hit.all()
        assert client.stats().errors == 0


def test_a_publish_during_a_slot_migration_follows_ask(published, spark, tmp_path_factory):
    """A reshard in progress: a slot MIGRATING on its owner and IMPORTING on another master,
    its keys moved. A new version's keys of that slot do not exist on the source, so each of
    its writes, read-backs and retain commands is answered -ASK (or -MOVED by the importing
    master without ASKING): the publish follows them there, and the lookups follow too."""
    from solaris_lib.config import load_settings

    url, servers, _, table, _ = published
    users = sorted(set(table["user_id"].to_pylist()))
    taken = key_slot(str(users[0]).encode())  # the slot the test above migrated
    user = next(u for u in users if key_slot(str(u).encode()) != taken)
    slot = key_slot(str(user).encode())
    source, target = _owner_and_other(servers, slot)
    settings = load_settings(data_root=str(tmp_path_factory.mktemp("migrating")),
                             redis_url=url, redis_key_prefix="solaris-migrating")
    write_embeddings(settings, table)
    _migrate(source, target, slot, settle=False)
    try:
        report = publish(spark, settings, INTERVAL, PublishConfig(verify_sample=10**6))
        assert (report.status, report.pairs) == ("published", 480)  # every pair read back
        importing = redis.Redis(port=target.port)
        keys = list(importing.scan_iter(f"solaris-migrating:e:{report.version}:{{{user}}}:*"))
        pipe = importing.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("ASKING")
            pipe.ttl(key)
        assert keys and all(ttl > RETAINED_TTL_S - 3600 for ttl in pipe.execute()[1::2])
        by_user: dict[int, list[int]] = {}
        for u, item in expected_vectors(table):
            by_user.setdefault(u, []).append(item)
        with SolarisClient.from_url(url, key_prefix=settings.redis_key_prefix,
                                    timeout_ms=1000) as client:
            assert client.version == report.version
            assert all(client.lookup(u, items).hit.all() for u, items in by_user.items())
            assert client.stats().errors == 0
    finally:
        _settle(servers, target, slot)


def test_retain_follows_a_key_that_moves_between_its_scan_and_its_expire(published):
    """A reshard moves keys while a retain pass runs: the source answers -ASK for a key
    that has moved, the importing master -MOVED (without ASKING), the old owner -MOVED once
    the slot has moved; the pass follows each through the cluster client."""
    from solaris_lib.cache.retain import _pipelined
    from solaris_lib.cache.server import CacheServer

    url, servers, prefix, table, report = published
    users = sorted(set(table["user_id"].to_pylist()))
    taken = {key_slot(str(u).encode()) for u in users[:2]}  # the slots the tests above moved
    user = next(u for u in users if key_slot(str(u).encode()) not in taken)
    slot = key_slot(str(user).encode())
    source, target = _owner_and_other(servers, slot)
    key = next(redis.Redis(port=source.port).scan_iter(f"{prefix}:e:*:{{{user}}}:*"))
    with CacheServer(url, prefix) as server:
        clients = {int(name.rsplit(":", 1)[1]): client for name, client in server.masters()}
        _migrate(source, target, slot, settle=False)
        try:
            for port in (source.port, target.port):  # -ASK, then -MOVED without ASKING
                assert _pipelined(server, clients[port], [("TTL", key)])[0] > 0
        finally:
            _settle(servers, target, slot)
        server.client.nodes_manager.initialize()
        assert _pipelined(server, clients[source.port], [("TTL", key)])[0] > 0  # -MOVED


def _node_id(port):
    return redis.Redis(port=port).execute_command("CLUSTER", "MYID").decode()


def _owner_and_other(servers, slot):
    for server in servers:
        r = redis.Redis(port=server.port)
        if r.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) > 0:
            other = next(s for s in servers if s.port != server.port)
            return server, other
    raise AssertionError(f"no master holds keys of slot {slot}")


def _migrate(source, target, slot, settle):
    src, dst = redis.Redis(port=source.port), redis.Redis(port=target.port)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", _node_id(source.port))
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", _node_id(target.port))
    keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)


def _settle(servers, target, slot):
    for server in servers:
        redis.Redis(port=server.port).execute_command("CLUSTER", "SETSLOT", slot, "NODE",
                                                      _node_id(target.port))


def test_a_stalled_master_is_a_timeout_then_short_circuits(published):
    """A master that stops answering (SIGSTOP, well under the node timeout): the lookups of its
    users are timeouts and its breaker opens; the other users never see it."""
    url, servers, prefix, table, _ = published
    pairs = expected_vectors(table)
    by_user: dict[int, list[int]] = {}
    for user, item in pairs:
        by_user.setdefault(user, []).append(item)
    router = redis.RedisCluster(host="127.0.0.1", port=servers[0].port)
    port = {u: router.get_node_from_key(f"{{{u}}}").port for u in by_user}
    router.close()
    user = next(iter(by_user))
    victim = next(s for s in servers if s.port == port[user])
    bystander = next(u for u in by_user if port[u] != victim.port)
    breaker = CircuitBreaker(failure_threshold=1, backoff=Backoff(initial_ms=20, max_ms=100))
    with SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=100, breaker=breaker,
                                miss_sample_rate=0) as client:
        wait_for(lambda: client.lookup(user, by_user[user]).hit.all())
        victim.process.send_signal(signal.SIGSTOP)
        try:
            stalled = client.lookup(user, by_user[user])
            short = client.lookup(user, by_user[user])
            other = client.lookup(bystander, by_user[bystander])
        finally:
            victim.process.send_signal(signal.SIGCONT)
        assert stalled.error == "timeout" and not stalled.hit.any()
        assert short.error == "circuit_open" and other.hit.all()
        wait_for(lambda: client.lookup(user, by_user[user]).hit.all())
        assert client.stats().timeouts >= 1


def test_the_multi_seed_url_works_for_the_misses_stream_too(published):
    """The client writes sampled misses through redis+cluster://h1,h2,h3 and the speculation
    job reads them back with the same URL (one URL parser for the whole project)."""
    import time
    from datetime import UTC, datetime, timedelta

    from solaris_lib.intervals import Interval
    from solaris_lib.speculation.misses import read_misses

    url, _, prefix, _, _ = published
    assert url.count(",") == 2  # three seeds
    with SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=1000, miss_sample_rate=1.0,
                                refresh_interval_s=0.05) as client:
        client.lookup(5, [10**13 + 1, 10**13 + 2])  # other tests sample misses of 10**12
        deadline = time.monotonic() + 10
        while client.stats().misses_written < 1:
            assert time.monotonic() < deadline, client.stats()
            time.sleep(0.02)
    now = datetime.fromtimestamp(time.time(), tz=UTC)
    rows = read_misses(url, prefix, Interval(now - timedelta(hours=1), now + timedelta(hours=1)))
    assert {(5, 10**13 + 1), (5, 10**13 + 2)} <= set(rows)


def test_a_cluster_that_never_forms_leaves_no_server_running(monkeypatch):
    """A failure after the servers started (here: the cluster never reports state ok) stops
    every server before the error propagates, so a failed fixture leaks no redis-server."""
    from solaris_lib.devtools.redis_cluster import RedisClusterServers
    from solaris_lib.errors import SolarisError

    cluster = RedisClusterServers(masters=3, replicas=0)
    started = []

    def never_ok(done, timeout_s, what):
        started.extend(cluster.servers)
        raise SolarisError(f"Redis Cluster: no {what} within {timeout_s} s")

    monkeypatch.setattr(cluster, "_wait", never_ok)
    with pytest.raises(SolarisError, match="no cluster state ok"):
        cluster.start()
    assert len(started) == 3 and cluster.servers == []
    assert all(server.process is None or server.process.poll() is not None for server in started)
