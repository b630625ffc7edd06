"""The lookup client against a real Redis, reading versions written straight from the spec
(docs/cache-format.md) with redis-py, independently of the publisher."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis

from solaris_lib.client import CacheFormatError, Level, SolarisClient
from tests.budgets import TEST_TIMEOUT_MS
from tests.cachespec import bucket
from tests.cachespec import put_version as spec_put_version

pytestmark = pytest.mark.integration
V1, V2 = "20260105T100000Z-aaaaaaaaaa", "20260105T110000Z-bbbbbbbbbb"


def put_version(r, prefix, version, data, dim, **kwargs):
    """Write a version by hand with redis-py (tests/cachespec.py: the spec's keys, fp16)."""
    spec_put_version(r.execute_command, prefix, version, data, dim, **kwargs)


def wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_hits_misses_levels_and_counters(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 2], 2: [0.5, -4]}}, dim=2)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS, miss_sample_rate=0) as client:
        result = client.lookup(7, [2, 99, 1])
        assert result.embeddings.dtype == np.float32
        assert result.embeddings.tolist() == [[0.5, -4.0], [0.0, 0.0], [1.0, 2.0]]
        assert result.hit.tolist() == [True, False, True]
        assert result.level.tolist() == [Level.EXACT, Level.MISS, Level.EXACT]
        assert (result.version, result.model_version, result.error) == (V1, "m1", None)
        assert client.lookup(8, [1]).hit.tolist() == [False]  # unknown user
        stats = client.stats()
    assert (stats.lookups, stats.pairs, stats.hits, stats.misses, stats.errors) == (2, 4, 2, 2, 0)
    assert stats.version_switches == 1 and stats.latency_p50_us > 0


def test_configured_fallback_fills_missed_rows(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 2]}}, dim=2)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS, fallback=[9, 8]) as client:
        assert client.lookup(7, [5, 1]).embeddings.tolist() == [[9.0, 8.0], [1.0, 2.0]]


def test_without_a_served_version_every_row_misses(redis_url, key_prefix):
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS, dim=3) as client:
        result = client.lookup(1, [1, 2])
        assert result.error == "no_version" and result.embeddings.shape == (2, 3)
        assert not result.hit.any() and client.version is None
        assert client.stats().no_version == 1


def test_alias_switch_is_picked_up_in_the_background(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS,
                                refresh_interval_s=0.02) as client:
        assert client.lookup(7, [1]).embeddings.tolist() == [[1.0, 1.0]]
        put_version(r, key_prefix, V2, {7: {1: [2, 2]}}, dim=2, model_version="m2")
        wait_for(lambda: client.version == V2)
        result = client.lookup(7, [1])
        assert result.embeddings.tolist() == [[2.0, 2.0]] and result.model_version == "m2"
        assert client.stats().version_switches == 2


@pytest.mark.parametrize("problem", ["incomplete", "other_dim"])
def test_unusable_versions_are_refused_and_the_old_one_kept(redis_url, key_prefix, r, problem):
    put_version(r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS, dim=2) as client:
        if problem == "incomplete":
            put_version(r, key_prefix, V2, {7: {1: [2, 2]}}, dim=2, state="writing")
        else:
            put_version(r, key_prefix, V2, {7: {1: [2, 2, 2]}}, dim=3)
        with pytest.raises(CacheFormatError):
            client.refresh()
        assert client.version == V1
        assert client.lookup(7, [1]).embeddings.tolist() == [[1.0, 1.0]]


def test_corrupt_values_are_counted_misses(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    r.hset(f"{key_prefix}:e:{V1}:{{7}}:{bucket(2, 4)}", "2", b"\x00\x01\x02")
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.lookup(7, [1, 2]).hit.tolist() == [True, False]
        assert client.stats().corrupt_values == 1


def test_sampled_misses_reach_the_stream(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS, miss_sample_rate=1.0,
                                miss_stream_maxlen=100) as client:
        client.lookup(7, [1, 5, 6])
        client.lookup(7, [1])  # no miss: nothing to sample
        wait_for(lambda: client.stats().misses_written == 1)
    ((_, fields),) = r.xrange(f"{key_prefix}:misses")
    assert fields[b"user"] == b"7" and fields[b"items"] == b"5,6"
    assert abs(int(fields[b"ts"]) - time.time() * 1000) < 60_000


def test_argument_forms(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.lookup(np.int64(7), np.array([1], dtype=np.uint32)).hit.tolist() == [True]
        empty = client.lookup(7, [])
        assert empty.embeddings.shape == (0, 2) and empty.error is None
        with pytest.raises(TypeError):
            client.lookup(7, [1.5])


def test_threads_share_one_client(redis_url, key_prefix, r):
    rng = np.random.default_rng(0)
    data = {u: {i: rng.standard_normal(4) for i in range(20)} for u in range(10)}
    put_version(r, key_prefix, V1, data, dim=4)
    failures = []
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=2000) as client:
        def work(seed):
            local = np.random.default_rng(seed)
            for _ in range(100):
                user = int(local.integers(10))
                items = local.choice(30, 8, replace=False)
                result = client.lookup(user, items)
                for row, item in enumerate(items):
                    want = np.asarray(data[user][item], "<f2").astype(np.float32) \
                        if item < 20 else np.zeros(4, np.float32)
                    if not np.array_equal(result.embeddings[row], want):
                        failures.append((user, item))
        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert client.stats().lookups == 400
    assert failures == []


def test_closed_client_answers_misses(redis_url, key_prefix, r):
    put_version(r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    client = SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS)
    client.close()
    client.close()
    result = client.lookup(7, [1])
    assert result.error == "closed" and not result.hit.any()
