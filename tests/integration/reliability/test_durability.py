"""Durability with the repository's infra/redis.conf (AOF, fsync every second): a version
published by the real publisher survives ``kill -9`` of the server and a restart; clients,
running and new, serve it again without a republish. Real Redis, real Spark."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import Backoff, CircuitBreaker, SolarisClient
from solaris_lib.devtools.redis_server import RedisServer
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.cache.conftest import (
    INTERVAL,
    PRIVATE_LIMITS,
    embeddings_table,
    expected_vectors,
    write_embeddings,
)
from tests.integration.cache.test_client import wait_for
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def all_hit(client, pairs) -> bool:
    return all(np.array_equal(client.lookup(u, [i]).embeddings[0], want) and
               client.lookup(u, [i]).hit[0] for (u, i), want in pairs.items())


def test_a_published_version_survives_kill_9_and_a_restart(spark, settings_for):
    conf = ROOT / "infra" / "redis.conf"
    assert "appendonly yes" in conf.read_text() and "appendfsync everysec" in conf.read_text()
    with RedisServer(config_file=conf, args=PRIVATE_LIMITS) as server:
        settings = settings_for(server.url)
        table = embeddings_table(users=20, per_user=10)
        write_embeddings(settings, table)
        report = publish(spark, settings, INTERVAL, PublishConfig())
        pairs = expected_vectors(table)
        breaker = CircuitBreaker(failure_threshold=1, backoff=Backoff(initial_ms=20, max_ms=200))
        with SolarisClient.from_url(server.url, key_prefix=settings.redis_key_prefix,
                                    timeout_ms=TEST_TIMEOUT_MS, breaker=breaker) as running:
            assert running.version == report.version and all_hit(running, pairs)
            # kill -9 loses no write the server made to its AOF (the file is in the kernel's
            # page cache; fsync matters only to a machine crash), but with everysec a slow
            # fsync lets the server hold its buffer for up to 2 s after replying: wait for it
            admin = redis.Redis.from_url(server.url)
            wait_for(lambda: admin.info("persistence").get("aof_buffer_length", 0) == 0)
            admin.close()
            server.stop(hard=True)  # kill -9: no shutdown, no final fsync
            assert running.lookup(0, [1]).error is not None
            server.start()  # same port and folder: the AOF is replayed
            wait_for(lambda: running.lookup(0, [1]).error is None, timeout_s=30)
            assert all_hit(running, pairs)
        with SolarisClient.from_url(server.url, key_prefix=settings.redis_key_prefix,
                                    timeout_ms=TEST_TIMEOUT_MS) as started_after:
            assert started_after.version == report.version and all_hit(started_after, pairs)
