"""The hierarchical fallback level end to end: Spark publish with the cluster tables into a real
Redis (single server and a 3-master cluster), then lookups returning EXACT, CLUSTER and MISS;
with the item-prior table also ITEM (the item's prior, from the client's memory)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from solaris_lib.cache.format import RETAINED_TTL_S, unpack_item_clusters, unpack_item_priors
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import SolarisClient
from solaris_lib.fallback import Level
from solaris_lib.fallback.clusters import CLUSTERING_MARKER, ItemClusters
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder, write_text
from tests.budgets import TEST_TIMEOUT_MS
from tests.cachespec import bucket
from tests.integration.cache.conftest import INTERVAL, write_embeddings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DIM = 4
USERS = [0, 1, 2, 3, 1234567]
ITEMS = list(range(100, 130))  # items 100..129; 128, 129 have no cluster
EXACT = {u: ITEMS[3 * k : 3 * k + 4] for k, u in enumerate(USERS)}  # 4 exact items per user


def cluster_of(item: int) -> int:
    return -1 if item >= 128 else item % 5


def vector(*key: int) -> np.ndarray:
    """A deterministic fp16-exact vector per (user, item) or (user, 'c', cluster)."""
    rng = np.random.default_rng(abs(hash(key)) % 2**32)
    return rng.integers(-64, 64, DIM).astype(np.float32) / 8


def cluster_rows(user: int) -> list[int]:
    """The clusters a user has a fallback value for: all but cluster 4 (user 3: none)."""
    return [] if user == 3 else [0, 1, 2, 3]


def _table(columns: dict) -> pa.Table:
    return pa.table(columns)


def write_world(settings, *, with_items: bool = True, with_clusters: bool = True,
                cluster_value=None) -> None:
    """The exact embeddings and (optionally) the two fallback tables of INTERVAL; every
    cluster row's value is ``cluster_value`` when given."""
    pairs = [(u, i) for u in USERS for i in EXACT[u]]
    write_embeddings(settings, _table({
        "user_id": pa.array([u for u, _ in pairs], pa.int64()),
        "item_id": pa.array([i for _, i in pairs], pa.int64()),
        "model_version": pa.array(["m1"] * len(pairs)),
        "embedding": pa.array([vector(u, i).astype("<f2").tobytes() for u, i in pairs],
                              pa.binary())}))
    layout = DataLayout.from_settings(settings)
    if with_clusters:
        rows = [(u, c) for u in USERS for c in cluster_rows(u)]
        bad = [(0, 9, "m0", vector(0, -1, 9)), (1, 9, "m1", np.zeros(DIM + 1))]
        table = _table({
            "user_id": pa.array([u for u, _ in rows] + [b[0] for b in bad], pa.int64()),
            "cluster_id": pa.array([c for _, c in rows] + [b[1] for b in bad], pa.int32()),
            "model_version": pa.array(["m1"] * len(rows) + [b[2] for b in bad]),
            "embedding": pa.array([(vector(u, -1, c) if cluster_value is None
                                   else cluster_value).astype("<f2").tobytes() for u, c in rows]
                                  + [b[3].astype("<f2").tobytes() for b in bad], pa.binary())})
        _write(layout.output(EMBEDDINGS, INTERVAL, "cluster"), table)
    if with_items:
        clustered = [i for i in ITEMS if cluster_of(i) >= 0]
        _write(layout.output(EMBEDDINGS, INTERVAL, "item_clusters"), _table({
            "item_id": pa.array(clustered[::-1], pa.int64()),
            "cluster_id": pa.array([cluster_of(i) for i in clustered[::-1]], pa.int32())}))


def _write(path: str, table: pa.Table) -> None:
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet")


def expected(user: int, item: int) -> tuple[int, np.ndarray]:
    if item in EXACT[user]:
        return Level.EXACT, vector(user, item)
    if cluster_of(item) in cluster_rows(user):
        return Level.CLUSTER, vector(user, -1, cluster_of(item))
    return Level.MISS, np.full(DIM, 0.5, np.float32)


def check_lookups(url: str, prefix: str, version: str) -> dict:
    levels = {Level.EXACT: 0, Level.CLUSTER: 0, Level.MISS: 0}
    with SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=TEST_TIMEOUT_MS,
                                fallback=[0.5] * DIM, miss_sample_rate=0) as client:
        assert client.version == version
        for user in USERS + [99]:
            items = [*ITEMS, 10**12]
            result = client.lookup(user, items)
            for row, item in enumerate(items):
                level, want = (expected(user, item) if user in EXACT
                               else (Level.MISS, np.full(DIM, 0.5, np.float32)))
                assert result.level[row] == level, (user, item)
                assert result.hit[row] == (level == Level.EXACT)
                assert np.array_equal(result.embeddings[row], want), (user, item)
                levels[level] += 1
        unclustered = client.lookup(0, [128, 10**12])  # no cluster to ask for: exact HMGET only
        assert unclustered.error is None and list(unclustered.level) == [Level.MISS] * 2
        levels[Level.MISS] += 2
        stats = client.stats()
    assert stats.cluster_hits == levels[Level.CLUSTER] and stats.hits == levels[Level.EXACT]
    assert stats.errors == 0 and stats.cluster_table_errors == 0
    return levels


def test_publish_with_cluster_tables_serves_three_levels(spark, settings_for, redis_url,
                                                         key_prefix):
    settings = settings_for(redis_url)
    write_world(settings)
    report = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))
    assert (report.status, report.pairs, report.users) == ("published", 20, 5)
    assert (report.cluster_pairs, report.clusters, report.item_clusters) == (16, 5, 28)
    assert report.cluster_dropped == {"other_model_version": 1, "wrong_embedding_length": 1}
    r = redis.Redis.from_url(redis_url)
    manifest = r.hgetall(f"{key_prefix}:m:{report.version}")
    assert {k: manifest[k.encode()].decode() for k in (
        "fallback", "clusters", "cluster_pairs", "item_clusters", "item_cluster_chunks",
        "pairs", "state")} == {"fallback": "cluster", "clusters": "5", "cluster_pairs": "16",
                               "item_clusters": "28", "item_cluster_chunks": "1",
                               "pairs": "20", "state": "complete"}
    key = f"{key_prefix}:h:{report.version}:items:0"
    ids, clusters = unpack_item_clusters([r.get(key)], 28)
    assert ids.tolist() == ITEMS[:28] and clusters.tolist() == [i % 5 for i in ITEMS[:28]]
    assert r.ttl(key) > RETAINED_TTL_S - 600  # served: kept
    exact = {}
    for key in r.scan_iter(f"{key_prefix}:e:{report.version}:{{1}}:[0-9]*"):
        fields = r.hgetall(key)
        assert all(bucket(int(f), 4) == int(key.rsplit(b":", 1)[1]) for f in fields)
        exact.update(fields)
    assert sorted(exact) == sorted(str(i).encode() for i in EXACT[1])
    cluster_hash = r.hgetall(f"{key_prefix}:e:{report.version}:{{1}}:c")
    assert sorted(cluster_hash) == [b"0", b"1", b"2", b"3"]
    assert cluster_hash[b"2"] == vector(1, -1, 2).astype("<f2").tobytes()
    levels = check_lookups(redis_url, key_prefix, report.version)
    assert all(levels.values()), levels


def test_without_both_tables_the_publish_is_as_before(spark, settings_for, redis_url,
                                                      key_prefix):
    settings = settings_for(redis_url)
    write_world(settings, with_items=False)  # cluster rows but no item -> cluster table
    plain = publish(spark, settings, INTERVAL, PublishConfig())
    r = redis.Redis.from_url(redis_url)
    manifest = r.hgetall(f"{key_prefix}:m:{plain.version}")
    assert b"fallback" not in manifest and plain.cluster_pairs == 0
    assert not list(r.scan_iter(f"{key_prefix}:h:*"))
    assert sum(r.hlen(k) for k in r.scan_iter(f"{key_prefix}:e:{plain.version}:{{1}}:*")) == 4
    assert not r.exists(f"{key_prefix}:e:{plain.version}:{{1}}:c")
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        result = client.lookup(1, [EXACT[1][0], 100])
        assert result.level.tolist() == [Level.EXACT, Level.MISS]
    write_world(settings)  # now both tables: a new version with the level
    full = publish(spark, settings, INTERVAL, PublishConfig(force=True))
    assert full.version != plain.version and full.served_version == full.version
    assert r.hget(f"{key_prefix}:m:{full.version}", "fallback") == b"cluster"


def test_a_cluster_table_embedded_for_another_clustering_is_not_served(spark, settings_for,
                                                                       redis_url, key_prefix):
    """The cluster table records the item table it was embedded for (the infer job's
    ``_CLUSTERING``): beside another item table (a run that failed between its two writes) its
    cluster ids name other items, so the level is left out; with the matching record it is
    served."""
    settings = settings_for(redis_url)
    write_world(settings)
    cluster_path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL, "cluster")
    items = np.array([i for i in ITEMS if cluster_of(i) >= 0], np.int64)
    clusters = np.array([cluster_of(i) for i in items], np.int32)
    write_text(f"{cluster_path}/{CLUSTERING_MARKER}", ItemClusters(items, (clusters + 1) % 5)
               .digest())
    stale = publish(spark, settings, INTERVAL, PublishConfig())
    r = redis.Redis.from_url(redis_url)
    assert stale.cluster_pairs == 0 and r.hget(f"{key_prefix}:m:{stale.version}", "fallback") is None
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.lookup(1, [EXACT[1][0], 100]).level.tolist() == [Level.EXACT, Level.MISS]
    write_text(f"{cluster_path}/{CLUSTERING_MARKER}", ItemClusters(items, clusters).digest())
    full = publish(spark, settings, INTERVAL, PublishConfig(force=True))
    assert (full.cluster_pairs, full.served_version) == (16, full.version)
    assert r.hget(f"{key_prefix}:m:{full.version}", "fallback") == b"cluster"


def test_a_level_of_only_non_finite_rows_is_published_without_it(spark, settings_for,
                                                                  private_redis):
    server = private_redis()
    settings = settings_for(server.url)
    write_world(settings, cluster_value=np.full(DIM, np.nan, np.float32))
    report = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))
    assert (report.status, report.pairs, report.cluster_pairs) == ("published", 20, 0)
    assert report.cluster_dropped == {"other_model_version": 1, "wrong_embedding_length": 1,
                                      "non_finite_embedding": 16}
    r = redis.Redis.from_url(server.url)
    prefix = settings.redis_key_prefix
    manifest = r.hgetall(f"{prefix}:m:{report.version}")
    assert (manifest[b"state"], manifest[b"cluster_pairs"]) == (b"complete", b"0")
    assert not list(r.scan_iter(f"{prefix}:e:{report.version}:*:c"))
    with SolarisClient.from_url(server.url, key_prefix=prefix, timeout_ms=TEST_TIMEOUT_MS,
                                miss_sample_rate=0) as client:
        assert client.version == report.version
        result = client.lookup(1, [EXACT[1][0], 110])  # 110: cluster 0, nothing served there
        assert result.level.tolist() == [Level.EXACT, Level.MISS] and result.error is None
        assert client.stats().cluster_table_errors == 0
    again = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))  # a rerun: a no-op
    assert (again.version, again.served_version) == (report.version, report.version)


def hmgets(user: int, items: list[int]) -> int:
    """The HMGETs of one lookup: one per bucket the exact items fall in, one of the user's
    cluster hash."""
    return len({bucket(i, 4) for i in items}) + 1


def test_lookups_send_only_hmgets_with_clusters(spark, settings_for, private_redis):
    server = private_redis()
    settings = settings_for(server.url)
    write_world(settings)
    r = redis.Redis.from_url(server.url)
    publish(spark, settings, INTERVAL, PublishConfig())
    prefix = settings.redis_key_prefix
    with SolarisClient.from_url(server.url, key_prefix=prefix, timeout_ms=TEST_TIMEOUT_MS,
                                refresh_interval_s=3600, miss_sample_rate=0) as client:
        r.config_resetstat()
        for user in USERS:
            result = client.lookup(user, ITEMS)
            assert (result.level == Level.CLUSTER).any() or user == 3
        commands = {k: v["calls"] for k, v in r.info("commandstats").items()}
    commands.pop("cmdstat_info", None)
    commands.pop("cmdstat_config|resetstat", None)
    assert commands == {"cmdstat_hmget": sum(hmgets(u, ITEMS) for u in USERS)}


def test_memory_estimate_includes_the_level(spark, settings_for, private_redis):
    server = private_redis()
    settings = settings_for(server.url)
    rng = np.random.default_rng(5)
    users, per_user, clusters, dim = 300, 40, 20, 64
    layout = DataLayout.from_settings(settings)
    write_embeddings(settings, _table({
        "user_id": np.repeat(np.arange(users, dtype=np.int64), per_user),
        "item_id": np.concatenate([rng.choice(10**6, per_user, replace=False)
                                   for _ in range(users)]).astype(np.int64),
        "model_version": pa.array(["m1"] * users * per_user),
        "embedding": _fp16_column(rng, users * per_user, dim)}))
    _write(layout.output(EMBEDDINGS, INTERVAL, "cluster"), _table({
        "user_id": np.repeat(np.arange(users, dtype=np.int64), clusters),
        "cluster_id": np.tile(np.arange(clusters, dtype=np.int32), users),
        "model_version": pa.array(["m1"] * users * clusters),
        "embedding": _fp16_column(rng, users * clusters, dim)}))
    _write(layout.output(EMBEDDINGS, INTERVAL, "item_clusters"), _table({
        "item_id": np.arange(0, 10**6, 50, dtype=np.int64),
        "cluster_id": (np.arange(20000) % clusters).astype(np.int32)}))
    r = redis.Redis.from_url(server.url)
    before = r.info("memory")["used_memory"]
    report = publish(spark, settings, INTERVAL, PublishConfig())
    used = r.info("memory")["used_memory"] - before
    assert report.cluster_pairs == users * clusters and report.item_clusters == 20000
    assert 0.9 < report.estimate_bytes / used < 1.1, (report.estimate_bytes, used)


def _fp16_column(rng, rows: int, dim: int) -> pa.Array:
    values = rng.standard_normal((rows, dim)).astype("<f2")
    return pa.array([row.tobytes() for row in values], pa.binary())


def test_malformed_cluster_values_and_tables(spark, settings_for, redis_url, key_prefix):
    settings = settings_for(redis_url)
    write_world(settings)
    report = publish(spark, settings, INTERVAL, PublishConfig())
    r = redis.Redis.from_url(redis_url)
    r.hset(f"{key_prefix}:e:{report.version}:{{0}}:c", "1", b"\x01\x02\x03")
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS,
                                miss_sample_rate=0) as client:
        result = client.lookup(0, [106, 107])  # 106 -> c1 (corrupt), 107 -> c2
        assert result.level.tolist() == [Level.MISS, Level.CLUSTER]
        assert client.stats().corrupt_values == 1
    r.set(f"{key_prefix}:h:{report.version}:items:0", b"\x00" * 5)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.version == report.version  # served, without the cluster level
        assert client.lookup(0, [EXACT[0][0], 107]).level.tolist() == [Level.EXACT, Level.MISS]
        assert client.stats().cluster_table_errors == 1


def test_cluster_level_through_redis_cluster(redis_cluster, spark, tmp_path_factory):
    from solaris_lib.config import load_settings

    url, _ = redis_cluster
    settings = load_settings(data_root=str(tmp_path_factory.mktemp("fallback-cluster")),
                             redis_url=url, redis_key_prefix="solaris-fallback-cluster")
    write_world(settings)
    report = publish(spark, settings, INTERVAL, PublishConfig())
    assert report.cluster_pairs == 16
    check_lookups(url, settings.redis_key_prefix, report.version)


PRIORS = list(range(100, 126))  # 126, 127 have a cluster but no prior; 128, 129 neither


def write_priors(settings) -> None:
    """The item-prior table: a prior per item of PRIORS, plus rows the publisher must drop."""
    rows = [(i, "m1", vector(-1, i)) for i in PRIORS]
    rows += [(126, "m0", vector(-1, 126)), (127, "m1", np.zeros(DIM + 1)),
             (100, "m1", vector(-1, 100))]  # other model version, wrong length, duplicate
    _write(DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL, "item_prior"),
           _table({"item_id": pa.array([r[0] for r in rows], pa.int64()),
                   "model_version": pa.array([r[1] for r in rows]),
                   "embedding": pa.array([r[2].astype("<f2").tobytes() for r in rows],
                                         pa.binary())}))


def expected_with_priors(user: int, item: int) -> tuple[int, np.ndarray]:
    level, want = expected(user, item) if user in EXACT else (Level.MISS, None)
    if level == Level.MISS and item in PRIORS:
        return Level.ITEM, vector(-1, item)
    return level, want if want is not None else np.full(DIM, 0.5, np.float32)


def test_item_priors_serve_the_item_level_without_a_round_trip(spark, settings_for,
                                                               private_redis):
    server = private_redis()
    settings = settings_for(server.url)
    write_world(settings)
    write_priors(settings)
    report = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))
    assert report.cluster_dropped == {
        "other_model_version": 1, "wrong_embedding_length": 1, "prior_other_model_version": 1,
        "prior_wrong_embedding_length": 1, "prior_duplicate_item": 1}
    prefix = settings.redis_key_prefix
    r = redis.Redis.from_url(server.url)
    manifest = r.hgetall(f"{prefix}:m:{report.version}")
    assert (manifest[b"item_priors"], manifest[b"item_prior_chunks"]) == (b"26", b"1")
    key = f"{prefix}:h:{report.version}:prior:0"
    ids, values = unpack_item_priors([r.get(key)], 26, 2 * DIM)
    assert ids.tolist() == PRIORS and r.ttl(key) > RETAINED_TTL_S - 600  # served: kept
    assert values.tobytes() == b"".join(vector(-1, i).astype("<f2").tobytes() for i in PRIORS)
    counts = {level: 0 for level in Level}
    with SolarisClient.from_url(server.url, key_prefix=prefix, timeout_ms=TEST_TIMEOUT_MS,
                                fallback=[0.5] * DIM, miss_sample_rate=0,
                                refresh_interval_s=3600) as client:
        r.config_resetstat()
        for user in USERS + [99]:
            items = [*ITEMS, 10**12]
            result = client.lookup(user, items)
            for row, item in enumerate(items):
                level, want = expected_with_priors(user, item)
                assert result.level[row] == level, (user, item)
                assert result.hit[row] == (level == Level.EXACT)
                assert np.array_equal(result.embeddings[row], want), (user, item)
                counts[level] += 1
        commands = {k: v["calls"] for k, v in r.info("commandstats").items()}
        stats = client.stats()
        server.stop(hard=True)  # a dead cache: the priors are in memory, so they still answer
        down = client.lookup(USERS[0], [*ITEMS, 10**12])
        after = client.stats()
    commands.pop("cmdstat_info", None)
    commands.pop("cmdstat_config|resetstat", None)
    items = [*ITEMS, 10**12]  # the ITEM level costs no network: only the lookups' HMGETs
    assert commands == {"cmdstat_hmget": sum(hmgets(u, items) for u in USERS + [99])}
    assert all(counts.values()), counts
    assert (stats.item_hits, stats.cluster_hits, stats.hits) == (
        counts[Level.ITEM], counts[Level.CLUSTER], counts[Level.EXACT])
    assert down.error == "connection" and not down.hit.any()
    for row, item in enumerate([*ITEMS, 10**12]):
        want = (Level.ITEM, vector(-1, item)) if item in PRIORS else (Level.MISS, [0.5] * DIM)
        assert down.level[row] == want[0], item
        assert np.array_equal(down.embeddings[row], np.asarray(want[1], np.float32)), item
    assert after.item_hits - stats.item_hits == sum(i in PRIORS for i in ITEMS)
    assert after.connection_errors == stats.connection_errors + 1
