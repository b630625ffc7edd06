"""The failover tier against a real Redis and the real publisher (Spark): the served version
never expires while it is served, the version before it stays as the failover until a later
one is verified, a retired version goes after its grace period, and clients that start during
an outage serve the last good version. Also the eviction-policy checks before and after the
switch."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from solaris_lib.cache.errors import EvictionPolicyError
from solaris_lib.cache.format import RETAINED_TTL_S, failover_key
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import SolarisClient
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    later,
    write_embeddings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TTL_S = 2  # a short TTL: the outage below lasts five of them


def version_keys(r, prefix: str, version: str) -> list[bytes]:
    return list(r.scan_iter(match=f"{prefix}:*{version}*", count=1000))


def hit_rate(client, table) -> float:
    pairs = expected_vectors(table)
    hits = 0
    for (user, item), want in pairs.items():
        result = client.lookup(user, [item])
        hits += bool(result.hit[0]) and np.array_equal(result.embeddings[0], want)
    return hits / len(pairs)


def test_an_outage_of_five_ttls_keeps_the_hit_rate_and_the_failover(spark, settings_for,
                                                                     redis_url, key_prefix):
    settings = settings_for(redis_url)
    r = redis.Redis.from_url(redis_url)
    tables = [embeddings_table(users=6, per_user=5, seed=s) for s in range(3)]
    config = PublishConfig(ttl_s=TTL_S, retire_after_s=1)
    versions = []
    for step, table in enumerate(tables[:2]):
        write_embeddings(settings, table, later(INTERVAL, step))
        versions.append(publish(spark, settings, later(INTERVAL, step), config).version)
    first, served = versions
    assert r.get(failover_key(key_prefix)).decode() == first

    rates = []
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as running:
        deadline = time.monotonic() + 5 * TTL_S  # the pipeline is stopped: nothing publishes
        while time.monotonic() < deadline:
            rates.append(hit_rate(running, tables[1]))
            time.sleep(TTL_S / 4)
        assert running.version == served
    assert len(rates) >= 10 and min(rates) == 1.0
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as started_late:
        assert started_late.version == served and hit_rate(started_late, tables[1]) == 1.0
    for version in (first, served):  # served and failover: no key expires while kept
        keys = version_keys(r, key_prefix, version)
        assert keys and all(r.ttl(k) > RETAINED_TTL_S - 3600 for k in keys)

    write_embeddings(settings, tables[2], later(INTERVAL, 2))
    retiring = version_keys(r, key_prefix, first)  # counted before: the grace is only 1 s
    report = publish(spark, settings, later(INTERVAL, 2), config)
    assert (report.served_version, report.failover_version) == (report.version, served)
    assert report.retained["retired_keys"] == len(retiring)
    # each retired key expires within the grace (-2: already gone, on a stalled machine)
    assert all(ms == -2 or 0 < ms <= 1000 for ms in map(r.pttl, retiring))
    time.sleep(1.5)  # the grace period of the retired version
    assert version_keys(r, key_prefix, first) == []
    assert all(r.ttl(k) > RETAINED_TTL_S - 3600 for k in version_keys(r, key_prefix, served))


def test_a_client_started_when_the_alias_version_is_gone_serves_the_failover(
        spark, settings_for, redis_url, key_prefix):
    settings = settings_for(redis_url)
    r = redis.Redis.from_url(redis_url)
    tables = [embeddings_table(users=4, per_user=3, seed=s) for s in range(2)]
    versions = []
    for step, table in enumerate(tables):
        write_embeddings(settings, table, later(INTERVAL, step))
        versions.append(publish(spark, settings, later(INTERVAL, step), PublishConfig()).version)
    r.delete(f"{key_prefix}:m:{versions[1]}")  # the served version's manifest lost
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.version == versions[0] and client.stats().failovers == 1
        assert hit_rate(client, tables[0]) == 1.0


def test_an_evicting_policy_is_refused_before_anything_is_written(spark, settings_for,
                                                                  private_redis):
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    settings = settings_for(server.url)
    write_embeddings(settings, embeddings_table(users=3, per_user=2))
    with pytest.raises(EvictionPolicyError, match="allkeys-lru.*Nothing was written"):
        publish(spark, settings, INTERVAL, PublishConfig())
    assert redis.Redis.from_url(server.url).dbsize() == 0


def test_an_evicting_policy_set_during_the_publish_is_found_after_the_switch(
        spark, settings_for, private_redis):
    server = private_redis()
    admin = redis.Redis.from_url(server.url)
    settings = settings_for(server.url)
    table = embeddings_table(users=3, per_user=2)
    write_embeddings(settings, table)

    def operator(phase: str) -> None:
        if phase == "switch":
            admin.config_set("maxmemory-policy", "volatile-lru")

    with pytest.raises(EvictionPolicyError, match="is served, but .*volatile-lru"):
        publish(spark, settings, INTERVAL, PublishConfig(), on_phase=operator)
    with SolarisClient.from_url(server.url, key_prefix=settings.redis_key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.version is not None and hit_rate(client, table) == 1.0


def test_a_version_switched_to_during_a_retain_pass_is_never_retired(
        spark, settings_for, redis_url, key_prefix, monkeypatch):
    """Another publisher (a rerun or backfill beside the DAG's) switches the alias and retains
    its version while this pass walks the keys: the pass sees the switch and spares it, and
    it leaves a version still being written to its own TTL."""
    from solaris_lib.cache import retain as retain_module
    from solaris_lib.cache.server import CacheServer

    settings = settings_for(redis_url)
    r = redis.Redis.from_url(redis_url)
    config = PublishConfig(ttl_s=600, retire_after_s=30)
    versions = []
    for step, seed in enumerate((0, 1)):
        write_embeddings(settings, embeddings_table(users=4, per_user=3, seed=seed),
                         later(INTERVAL, step))
        versions.append(publish(spark, settings, later(INTERVAL, step), config).version)
    first, second = versions
    # as it was before the other publisher's switch: `second` written, `first` served
    r.set(f"{key_prefix}:alias", first)
    r.delete(failover_key(key_prefix))
    for key in version_keys(r, key_prefix, second):
        r.expire(key, 600)
    walk = retain_module._pages

    def pages_after_the_other_switch(client, pattern):
        if r.get(f"{key_prefix}:alias").decode() == first:  # its switch, then its retain pass
            r.set(f"{key_prefix}:alias", second)
            r.set(failover_key(key_prefix), first)
            for key in version_keys(r, key_prefix, second):
                r.expire(key, RETAINED_TTL_S)
        yield from walk(client, pattern)

    monkeypatch.setattr(retain_module, "_pages", pages_after_the_other_switch)
    third = "20260105T230000Z-cccccccccc"  # a publish in progress
    writing = f"{key_prefix}:e:{third}:{{9}}:0"
    manifest = {**r.hgetall(f"{key_prefix}:m:{second}"), b"version": third, b"state": "writing"}
    r.hset(f"{key_prefix}:m:{third}", mapping=manifest)
    r.hset(writing, "1", b"\x00\x3c")
    r.expire(writing, 3600)  # longer than this pass's ceiling: another publisher's ttl_s
    with CacheServer(redis_url, key_prefix) as server:
        done = retain_module.retain(server, grace_s=30, ttl_ceiling=600)
    assert done.served == first and r.get(f"{key_prefix}:alias").decode() == second
    for version in (first, second):
        assert all(r.ttl(k) > RETAINED_TTL_S - 3600 for k in version_keys(r, key_prefix, version))
    assert r.ttl(writing) > 600
