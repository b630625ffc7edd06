"""A user with a million pairs publishes: its rows go out in bounded HSETs (never one command
of the whole user), every pair reaches the server and reads back. Real Redis (a private server,
to count its commands), real Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import redis

from solaris_lib.cache.pairs import binary_column
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.cache.writer import MAX_FIELDS_PER_HSET
from solaris_lib.client import SolarisClient
from tests.budgets import TEST_TIMEOUT_MS
from tests.cachespec import bucket
from tests.integration.cache.conftest import INTERVAL, write_embeddings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PAIRS = 1_000_000
GIANT = 42


def test_a_user_with_a_million_pairs_publishes_in_bounded_commands(spark, settings_for,
                                                                   private_redis):
    server = private_redis("--maxmemory", "1gb")
    admin = redis.Redis.from_url(server.url)
    settings = settings_for(server.url)
    rng = np.random.default_rng(5)
    items = rng.choice(10**9, PAIRS, replace=False).astype(np.int64)
    values = rng.standard_normal((PAIRS, 2)).astype("<f2")
    table = pa.table({
        "user_id": np.full(PAIRS, GIANT, np.int64), "item_id": items,
        "model_version": pa.array(["m1"] * PAIRS, pa.string()),
        "embedding": binary_column(values)})
    write_embeddings(settings, table)
    admin.config_resetstat()
    report = publish(spark, settings, INTERVAL, PublishConfig(buckets=4))
    assert (report.status, report.pairs, report.users) == ("published", PAIRS, 1)
    calls = admin.info("commandstats")["cmdstat_hset"]["calls"]
    assert calls >= PAIRS // MAX_FIELDS_PER_HSET  # never one HSET of the whole user
    prefix = settings.redis_key_prefix
    lengths = [admin.hlen(f"{prefix}:e:{report.version}:{{{GIANT}}}:{b}") for b in range(4)]
    assert sum(lengths) == PAIRS
    assert lengths == np.bincount([bucket(int(i), 4) for i in items], minlength=4).tolist()
    sample = rng.choice(PAIRS, 2000, replace=False)
    with SolarisClient.from_url(server.url, key_prefix=prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        result = client.lookup(GIANT, items[sample])
    assert result.hit.all()
    assert np.array_equal(result.embeddings, values[sample].astype(np.float32))
