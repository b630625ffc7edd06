"""Faults on private redis-servers that the tests start, stop, pause and crash.

* a server paused or killed under lookups: every lookup returns within its budget, all
  misses, no exception; the breaker stops the waiting; lookups hit again after recovery;
* a server killed during a publish (mid-write, or just before the switch): after a restart the
  previous version is still the one served, whole;
* readers during an alias switch never see a mix of versions.
"""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
import redis

from solaris_lib.cache.errors import PublishError
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import Backoff, CircuitBreaker, SolarisClient
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    later,
    write_embeddings,
)
from tests.integration.cache.test_client import put_version, wait_for

pytestmark = pytest.mark.integration
TIMEOUT_MS = 50
# Generous for a shared 2-core machine under load; the point is "bounded", not "fast".
MARGIN_S = 0.25
VERSION = "20260105T100000Z-aaaaaaaaaa"


def timed_lookup(client, user, items):
    started = time.perf_counter()
    result = client.lookup(user, items)
    return result, time.perf_counter() - started


def fast_breaker():
    return CircuitBreaker(failure_threshold=1, backoff=Backoff(initial_ms=20, max_ms=100))


def test_paused_server_costs_one_timeout_then_short_circuits(private_redis):
    server = private_redis()
    r = redis.Redis.from_url(server.url)
    put_version(r, "p", VERSION, {7: {1: [1, 1]}}, dim=2)
    with SolarisClient.from_url(server.url, key_prefix="p", timeout_ms=TIMEOUT_MS,
                                breaker=fast_breaker(), background_timeout_ms=100) as client:
        wait_for(lambda: client.lookup(7, [1]).hit.all())  # one stall of a busy machine
        client.stats(reset=True)
        server.process.send_signal(signal.SIGSTOP)
        try:
            result, seconds = timed_lookup(client, 7, [1, 2])
            assert result.error == "timeout" and not result.hit.any()
            assert seconds < TIMEOUT_MS / 1000 + MARGIN_S
            result, seconds = timed_lookup(client, 7, [1])
            assert result.error == "circuit_open" and seconds < MARGIN_S
            stats = client.stats()
        finally:
            server.process.send_signal(signal.SIGCONT)
        wait_for(lambda: client.lookup(7, [1]).hit.all())
    assert stats.timeouts == 1 and stats.breaker_opens == 1 and stats.short_circuited >= 1


def test_server_killed_under_a_stream_of_lookups(private_redis):
    server = private_redis()
    data = {u: {i: [u, i] for i in range(5)} for u in range(20)}
    put_version(redis.Redis.from_url(server.url), "p", VERSION, data, dim=2)
    outcomes, crashes, stop = [], [], threading.Event()

    with SolarisClient.from_url(server.url, key_prefix="p", timeout_ms=TIMEOUT_MS,
                                breaker=fast_breaker()) as client:
        def reader():
            user = 0
            while not stop.is_set():
                try:
                    result, seconds = timed_lookup(client, user % 20, [0, 1, 2])
                except Exception as exc:  # noqa: BLE001 - the test is that nothing escapes
                    crashes.append(exc)
                    return
                outcomes.append((result.error, bool(result.hit.all()),
                                 bool(result.hit.any()), seconds))
                user += 1

        thread = threading.Thread(target=reader)
        thread.start()
        wait_for(lambda: len(outcomes) > 50)
        server.stop(hard=True)
        killed_at = len(outcomes)
        wait_for(lambda: len(outcomes) > killed_at + 200)
        server.start()  # same port, empty: the data is written again
        put_version(redis.Redis.from_url(server.url), "p", VERSION, data, dim=2)
        # a lookup in flight while the data was written again may still miss, unflagged: the
        # first outcome certainly issued after the write is the one after it
        written_at = len(outcomes) + 1
        wait_for(lambda: len(outcomes) > written_at and outcomes[-1][1])
        stop.set()
        thread.join()
    recovered = next(n for n in range(written_at, len(outcomes)) if outcomes[n][1])
    assert crashes == []
    assert all(seconds < TIMEOUT_MS / 1000 + MARGIN_S for *_, seconds in outcomes)
    failed = [o for o in outcomes if o[0] is not None]
    assert failed and all(not any_hit for _, _, any_hit, _ in failed)
    assert {error for error, *_ in failed} <= {"connection", "timeout", "circuit_open"}
    # once the data is back, a lookup misses only with its error said (a stall may time out)
    assert outcomes[0][1] and all(hit or error is not None
                                  for error, hit, *_ in outcomes[recovered:])


@pytest.mark.slow
@pytest.mark.parametrize("kill_when", ["mid_write", "before_switch"])
def test_server_killed_during_a_publish_keeps_the_old_version(spark, settings_for,
                                                              private_redis, kill_when):
    server = private_redis("--appendonly", "yes", "--appendfsync", "always")
    settings = settings_for(server.url)
    prefix = settings.redis_key_prefix
    old_table = embeddings_table(users=20, per_user=5, dim=8, seed=1)
    write_embeddings(settings, old_table)
    old = publish(spark, settings, INTERVAL, PublishConfig())
    write_embeddings(settings, embeddings_table(users=500, per_user=20, dim=8, seed=2),
                     later(INTERVAL))
    killer = _Killer(server)

    def on_phase(phase):
        if phase == "write" and kill_when == "mid_write":
            killer.start()
        if phase == "switch":
            killer.start()
            killer.join()

    with pytest.raises(PublishError, match="previous version is still served|failed") as caught:
        publish(spark, settings, later(INTERVAL), PublishConfig(), on_phase=on_phase)
    killer.join(timeout=60)  # the publish fails as the server dies, maybe before stop() returns
    assert not killer.is_alive()
    assert killer.killed_with_keys >= 1  # keys of the new version existed when it died
    assert "still served" in str(caught.value)
    server.start()  # same port and folder: the append-only file is reloaded
    r = redis.Redis.from_url(server.url)
    assert r.get(f"{prefix}:alias").decode() == old.version
    # a generous budget: this checks what is served, not how fast (the machine may be loaded)
    with SolarisClient.from_url(server.url, key_prefix=prefix, timeout_ms=2000) as client:
        assert client.version == old.version
        for (user, item), want in expected_vectors(old_table).items():
            result = client.lookup(user, [item])
            assert result.hit.all() and np.array_equal(result.embeddings[0], want)


class _Killer(threading.Thread):
    """Kills the server once keys of the next version exist (at once when started after they
    all do). Made before that publish starts: the keys then on the server are the baseline."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server = server
        self.baseline = redis.Redis.from_url(server.url).dbsize()
        self.killed_with_keys = -1
        self._launched = False

    def start(self):
        if not self._launched:
            self._launched = True
            super().start()

    def run(self):
        r = redis.Redis.from_url(self.server.url)
        deadline = time.monotonic() + 5
        keys = 0
        while time.monotonic() < deadline:
            keys = r.dbsize() - self.baseline
            if keys > 2:  # the new manifest and at least two of the new version's hashes
                break
            time.sleep(0.001)
        self.killed_with_keys = keys - 1  # before the kill: the publisher fails at once
        self.server.stop(hard=True)


@pytest.mark.slow
def test_readers_during_an_alias_switch_never_see_a_mix(spark, settings_for, redis_url,
                                                        key_prefix):
    settings = settings_for(redis_url)
    base = embeddings_table(users=10, per_user=30, dim=4)

    def constant(value, model_version):
        rows = pa.array([np.full(4, value, "<f2").tobytes()] * base.num_rows, pa.binary())
        return (base.set_column(3, "embedding", rows)
                .set_column(2, "model_version", pa.array([model_version] * base.num_rows)))

    write_embeddings(settings, constant(1.0, "m1"))
    publish(spark, settings, INTERVAL, PublishConfig())
    items = {u: base.filter(pa.compute.equal(base["user_id"], u))["item_id"].to_pylist()
             for u in range(10)}
    seen, mixes, stop = set(), [], threading.Event()
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, refresh_interval_s=0.005,
                                timeout_ms=1000) as client:
        def reader(seed):
            rng = np.random.default_rng(seed)
            while not stop.is_set():
                user = int(rng.integers(10))
                result = client.lookup(user, items[user])
                want = {"m1": 1.0, "m2": 2.0}[result.model_version]
                seen.add(result.model_version)
                if not result.hit.all() or not (result.embeddings == want).all():
                    mixes.append((result.model_version, np.unique(result.embeddings)))

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
        for thread in threads:
            thread.start()
        write_embeddings(settings, constant(2.0, "m2"), later(INTERVAL))
        new = publish(spark, settings, later(INTERVAL), PublishConfig())
        wait_for(lambda: client.version == new.version and "m2" in seen)
        stop.set()
        for thread in threads:
            thread.join()
    assert mixes == [] and seen == {"m1", "m2"}
