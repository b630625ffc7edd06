"""Publishing through Spark into a real Redis, read back through the client."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from solaris_lib import storage
from solaris_lib.cache import publish as publish_module
from solaris_lib.cache.errors import (
    CacheUnavailableError,
    InsufficientMemoryError,
    PublishError,
    PublishInputError,
)
from solaris_lib.cache.format import CODEC, RETAINED_TTL_S, STATE_COMPLETE, Manifest
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.cache.rows import EXACT, NON_FINITE
from solaris_lib.cache.server import CacheServer
from solaris_lib.cache.writer import WriteTarget, write_rows
from solaris_lib.cli import main as cli_main
from solaris_lib.client import SolarisClient
from solaris_lib.layout import CACHE as CACHE_STAGE
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder, list_files
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    later,
    write_embeddings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def lookup_all(url, prefix, table):
    """(user, item) -> looked-up float32 row, for every pair of ``table``."""
    found = {}
    pairs = expected_vectors(table)
    users = sorted({u for u, _ in pairs})
    with SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=2000) as client:
        for user in users:
            items = [i for u, i in pairs if u == user]
            result = client.lookup(user, items)
            assert result.hit.all(), f"user {user} missed {np.asarray(items)[~result.hit]}"
            found.update({(user, i): row for i, row in zip(items, result.embeddings,
                                                            strict=True)})
    return found


def version_dump(r, prefix, version):
    keys = sorted(r.scan_iter(f"{prefix}:e:{version}:*", count=1000))
    return {k: r.hgetall(k) for k in keys}


def test_publish_then_lookup_returns_the_input(spark, settings_for, redis_url, key_prefix):
    settings = settings_for(redis_url)
    table = embeddings_table(users=30, per_user=12)
    write_embeddings(settings, table)
    report = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))
    assert (report.status, report.pairs, report.users, report.dim) == ("published", 360, 30, 8)
    assert report.served_version == report.version and report.previous_version is None
    found = lookup_all(redis_url, key_prefix, table)
    for pair, want in expected_vectors(table).items():
        assert np.array_equal(found[pair], want)
    r = redis.Redis.from_url(redis_url)
    keys = list(r.scan_iter(f"{key_prefix}:e:{report.version}:{{0}}:*"))
    assert 1 <= len(keys) <= 4 and all(r.ttl(k) > RETAINED_TTL_S - 600 for k in keys)  # served: kept
    manifest = r.hgetall(f"{key_prefix}:m:{report.version}")
    assert manifest[b"state"] == b"complete" and manifest[b"pairs"] == b"360"
    assert not list_files(DataLayout.from_settings(settings).stage_root(CACHE_STAGE))


def test_rerun_republishes_the_same_version_and_bytes(spark, settings_for, redis_url,
                                                      key_prefix):
    settings = settings_for(redis_url)
    write_embeddings(settings, embeddings_table(users=10, per_user=5))
    first = publish(spark, settings, INTERVAL, PublishConfig())
    r = redis.Redis.from_url(redis_url)
    before = version_dump(r, key_prefix, first.version)
    again = publish(spark, settings, INTERVAL, PublishConfig())
    assert (again.status, again.version) == ("already_served", first.version)
    r.delete(f"{key_prefix}:alias")  # as if the first run had died before its switch
    rerun = publish(spark, settings, INTERVAL, PublishConfig())
    assert (rerun.status, rerun.version) == ("published", first.version)
    assert version_dump(r, key_prefix, first.version) == before and len(before) == first.keys


def test_a_rerun_finding_its_version_complete_writes_and_checks_it_again(
        spark, settings_for, redis_url, key_prefix, monkeypatch):
    settings = settings_for(redis_url)
    table = embeddings_table(users=30, per_user=12)
    write_embeddings(settings, table)

    def killed(*args, **kwargs):
        raise CacheUnavailableError("the driver died between completion and its switch")

    monkeypatch.setattr(CacheServer, "switch_alias", killed)
    before = storage.replacements()
    with pytest.raises(PublishError, match="died between completion"):
        publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))
    assert storage.replacements() == before + 1  # the switch was sent: the run's claim stays
    monkeypatch.undo()
    r = redis.Redis.from_url(redis_url)
    [manifest] = r.scan_iter(f"{key_prefix}:m:*")
    assert r.hget(manifest, "state") == b"complete" and r.get(f"{key_prefix}:alias") is None
    keys = list(r.scan_iter(f"{key_prefix}:e:*"))
    assert 0 < r.pttl(manifest) <= min(r.pttl(k) for k in keys)  # it never outlives a key
    r.delete(*keys[:3])  # expired (or lost) before the rerun
    rerun = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=600))
    assert (rerun.status, rerun.pairs, rerun.users) == ("published", 360, 30)
    assert rerun.served_version == rerun.version == manifest.decode().split(":m:", 1)[1]
    found = lookup_all(redis_url, key_prefix, table)  # every pair a hit
    assert all(np.array_equal(found[p], w) for p, w in expected_vectors(table).items())


def test_completing_a_manifest_never_outlives_its_keys_nor_shortens_a_retained_one(
        redis_url, key_prefix):
    r = redis.Redis.from_url(redis_url)
    with CacheServer(redis_url, key_prefix) as server:
        for retained in (False, True):
            version = f"20260105T100000Z-{'b' if retained else 'a'}{'0' * 9}"
            manifest = Manifest(version, "m1", CODEC, 8, 4, "", "", 10, 2, "0" * 32, 600)
            assert server.write_manifest(manifest)
            if retained:  # a served or failover version's: retain gave it ten years
                r.expire(f"{key_prefix}:m:{version}", RETAINED_TTL_S)
            server.complete_manifest(replace(manifest, state=STATE_COMPLETE), 100)
            ttl = r.ttl(f"{key_prefix}:m:{version}")
            assert ttl > RETAINED_TTL_S - 60 if retained else 95 <= ttl <= 100, (retained, ttl)
            assert server.manifest(version).complete


def test_a_version_whose_ttl_ran_out_during_its_write_is_not_switched_to(
        spark, settings_for, redis_url, key_prefix, monkeypatch):
    settings = settings_for(redis_url)
    write_embeddings(settings, embeddings_table(users=5, per_user=4))

    class Later:  # the publisher's clock, an hour on: its keys (TTL 1 h) live in fact
        @staticmethod
        def monotonic() -> float:
            return time.monotonic() + 3600

    def slow(phase: str) -> None:
        if phase == "switch":  # the write and checks took longer than the TTL allows
            monkeypatch.setattr(publish_module, "time", Later)

    before = storage.replacements()
    with pytest.raises(PublishError, match="more than its TTL allows"):
        publish(spark, settings, INTERVAL, PublishConfig(ttl_s=3600), on_phase=slow)
    assert redis.Redis.from_url(redis_url).get(f"{key_prefix}:alias") is None
    assert storage.replacements() == before  # nothing served changed: a claim is withdrawn


def test_a_version_is_not_switched_to_when_the_retain_pass_may_outlast_its_ttl(
        spark, settings_for, redis_url, key_prefix, monkeypatch):
    """100 s of TTL left is above the 60 s floor, but not when the retain pass after the switch
    (at a tenth of a key a second here) may take longer to reach the version's last key."""
    settings = settings_for(redis_url)
    write_embeddings(settings, embeddings_table(users=5, per_user=4))

    class Later:  # the publisher's clock, 3,500 s on: 100 s of the 3,600 s TTL left
        perf_counter = staticmethod(time.perf_counter)

        @staticmethod
        def monotonic() -> float:
            return time.monotonic() + 3500

    def slow(phase: str) -> None:
        if phase == "switch":
            monkeypatch.setattr(publish_module, "time", Later)

    monkeypatch.setattr(publish_module, "RETAIN_KEYS_PER_S", 0.1)  # the version has >= 10 keys
    with pytest.raises(PublishError,
                       match=r"\(3600 s, 9\d s left, \d+ s needed with the retain pass"):
        publish(spark, settings, INTERVAL, PublishConfig(ttl_s=3600), on_phase=slow)
    assert redis.Redis.from_url(redis_url).get(f"{key_prefix}:alias") is None
    monkeypatch.setattr(publish_module, "time", time)
    monkeypatch.setattr(publish_module, "RETAIN_KEYS_PER_S", 10**9)  # the same 100 s: enough
    report = publish(spark, settings, INTERVAL, PublishConfig(ttl_s=3600), on_phase=slow)
    assert report.served_version == report.version


def _bad_rows(dim):
    good = np.full(dim, 0.25, "<f2").tobytes()
    nan = np.array([np.nan] + [0.0] * (dim - 1), "<f2").tobytes()
    rows = [  # user, item, model version, embedding, expected reason
        (None, 1, "m1", good, "null_user_id"),
        (1, -5, "m1", good, "negative_item_id"),
        (1, 2, "m1", None, "null_embedding"),
        (1, 3, "m1", good[:-2], "wrong_embedding_length"),
        (1, 4, "m0", good, "other_model_version"),
        (1, 5, "m1", nan, "non_finite_embedding"),
    ]
    return rows


def test_bad_rows_are_quarantined_and_duplicates_resolved(spark, settings_for, redis_url,
                                                          key_prefix):
    settings = settings_for(redis_url)
    dim = 8
    clean = embeddings_table(users=5, per_user=4, dim=dim)
    low, high = np.full(dim, -1.0, "<f2").tobytes(), np.full(dim, 1.0, "<f2").tobytes()
    bad = _bad_rows(dim)
    extra = pa.table({
        "user_id": pa.array([r[0] for r in bad] + [2, 2], pa.int64()),
        "item_id": pa.array([r[1] for r in bad] + [77, 77], pa.int64()),
        "model_version": [r[2] for r in bad] + ["m1", "m1"],
        # fp16 -1.0 is 0xBC00: its bytes sort above +1.0 (0x3C00), so +1.0 must win
        "embedding": pa.array([r[3] for r in bad] + [low, high], pa.binary()),
    })
    write_embeddings(settings, pa.concat_tables([clean, extra]))
    report = publish(spark, settings, INTERVAL, PublishConfig())
    assert report.quarantined == {r[4]: 1 for r in bad}
    assert set(report.quarantined) == (set(EXACT.problems[1:]) | {NON_FINITE}) - {
        "null_item_id", "negative_user_id"}
    assert (report.pairs, report.duplicates) == (clean.num_rows + 1, 1)
    folder = DataLayout.from_settings(settings).output(CACHE_STAGE, INTERVAL, "quarantine")
    quarantined = pa.concat_tables([pq.read_table(f) for f in list_files(folder)])
    assert sorted(quarantined["_reason"].to_pylist()) == sorted(r[4] for r in bad)
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.lookup(2, [77]).embeddings.tolist() == [[1.0] * dim]
        assert client.lookup(1, [5, 3, 4]).hit.tolist() == [False, False, False]


def test_backfills_leave_a_later_served_version(spark, settings_for, redis_url, key_prefix):
    settings = settings_for(redis_url)
    write_embeddings(settings, embeddings_table(users=3, per_user=3, seed=1), later(INTERVAL))
    newer = publish(spark, settings, later(INTERVAL), PublishConfig())
    write_embeddings(settings, embeddings_table(users=3, per_user=3, seed=2))
    older = publish(spark, settings, INTERVAL, PublishConfig())
    r = redis.Redis.from_url(redis_url)
    assert older.status == "superseded" and older.served_version == newer.version
    assert r.get(f"{key_prefix}:alias").decode() == newer.version
    assert not list(r.scan_iter(f"{key_prefix}:e:{older.version}:*"))
    forced = publish(spark, settings, INTERVAL, PublishConfig(force=True))
    assert forced.status == "published" and forced.served_version == older.version


def test_any_bucket_count_serves_the_same_values(spark, settings_for, redis_url, key_prefix):
    settings = settings_for(redis_url)
    table = embeddings_table(users=6, per_user=40, dim=4)
    write_embeddings(settings, table)
    r = redis.Redis.from_url(redis_url)
    versions = set()
    for buckets in (1, 8):
        report = publish(spark, settings, INTERVAL, PublishConfig(buckets=buckets, force=True))
        versions.add(report.version)
        keys = list(r.scan_iter(f"{key_prefix}:e:{report.version}:*"))
        assert report.keys == len(keys) and {k.rsplit(b":", 1)[1] for k in keys} == {
            str(b).encode() for b in range(buckets)}
        found = lookup_all(redis_url, key_prefix, table)
        assert all(np.array_equal(found[p], v) for p, v in expected_vectors(table).items())
    assert len(versions) == 2  # the bucket count is part of the version id


def test_input_problems_are_clear_errors(spark, settings_for, redis_url, tmp_path):
    settings = settings_for(redis_url)
    with pytest.raises(PublishInputError, match="no complete embeddings partition"):
        publish(spark, settings, INTERVAL, PublishConfig())
    wrong = embeddings_table(2, 2).set_column(0, "user_id", pa.array(["a", "b", "c", "d"]))
    write_embeddings(settings, wrong)
    with pytest.raises(PublishInputError, match="user_id is string, expected bigint"):
        publish(spark, settings, INTERVAL, PublishConfig())
    only_bad = embeddings_table(2, 2).set_column(1, "item_id", pa.array([-1, -2, -3, -4]))
    write_embeddings(settings, only_bad)
    with pytest.raises(PublishInputError, match="none of 4 rows is publishable"):
        publish(spark, settings, INTERVAL, PublishConfig())


@pytest.mark.parametrize("server_args, encoding", [
    ((), "hashtable"),
    (("--hash-max-listpack-value", "160", "--hash-max-listpack-entries", "512"), "listpack"),
])
def test_memory_estimate_matches_info_memory(spark, settings_for, private_redis, server_args,
                                             encoding):
    server = private_redis(*server_args)
    settings = settings_for(server.url)
    write_embeddings(settings, embeddings_table(users=300, per_user=60, dim=64))
    r = redis.Redis.from_url(server.url)
    before = r.info("memory")["used_memory"]
    report = publish(spark, settings, INTERVAL, PublishConfig())
    used = r.info("memory")["used_memory"] - before
    assert r.object("encoding", f"{settings.redis_key_prefix}:e:{report.version}:{{0}}:0") == \
        encoding.encode()
    assert report.listpack_keys == (report.keys if encoding == "listpack" else 0)
    assert 0.9 < report.estimate_bytes / used < 1.1, (report.estimate_bytes, used)


def test_refuses_a_version_that_does_not_fit(spark, settings_for, private_redis):
    server = private_redis("--maxmemory", "6mb")
    settings = settings_for(server.url)
    write_embeddings(settings, embeddings_table(users=20, per_user=10, dim=64))
    first = publish(spark, settings, INTERVAL, PublishConfig())
    write_embeddings(settings, embeddings_table(users=400, per_user=100, dim=64), later(INTERVAL))
    with pytest.raises(InsufficientMemoryError, match=r"needs [\d,]+ bytes") as caught:
        publish(spark, settings, later(INTERVAL), PublishConfig())
    assert caught.value.needed_bytes > caught.value.free_bytes
    assert first.version in str(caught.value)
    r = redis.Redis.from_url(server.url)
    assert r.get(f"{settings.redis_key_prefix}:alias").decode() == first.version
    assert r.dbsize() == first.keys + 2  # the first version's user hashes, manifest, alias


def test_cli_publish_and_info(spark, settings_for, redis_url, key_prefix, monkeypatch, capsys):
    settings = settings_for(redis_url)
    write_embeddings(settings, embeddings_table(users=3, per_user=2))
    for name, value in (("SOLARIS_DATA_ROOT", settings.data_root),
                        ("SOLARIS_REDIS_URL", redis_url), ("SOLARIS_REDIS_KEY_PREFIX", key_prefix)):
        monkeypatch.setenv(name, value)
    start, end = INTERVAL.start.isoformat(), INTERVAL.end.isoformat()
    assert cli_main(["publish-cache", "--start", start, "--end", end, "--ttl", "1h"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["status"] == "published" and report["ttl_s"] == 3600
    assert cli_main(["cache-info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["served_version"] == report["version"]
    assert info["manifest"]["pairs"] == "6"


def _grouped_files(table: pa.Table, seed: int) -> list[pa.Table]:
    """Two files as another writer might leave them: users contiguous but their items in
    random order, except user 6, whose rows lie in the middle of both files (so they are
    apart whichever file Spark reads first)."""
    rng = np.random.default_rng(seed)
    users = table["user_id"].to_numpy()
    runs = [table.take(rng.permutation(np.flatnonzero(users == u))) for u in range(12)]
    head, tail = runs[6].slice(0, 3), runs[6].slice(3)
    return [pa.concat_tables([*runs[0:3], head, *runs[3:6]]),
            pa.concat_tables([*runs[7:10], tail, *runs[10:12]])]


def _republish(spark, settings, r, prefix, version, files, caplog) -> tuple[dict, str]:
    """Drop ``version`` from Redis, write ``files`` as the partition, publish it again."""
    for key in r.scan_iter(f"{prefix}:*", count=1000):
        r.delete(key)
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    with atomic_folder(path) as staging:
        for index, part in enumerate(files):
            pq.write_table(part, f"{staging}/part-{index:05d}.parquet")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="solaris_lib.cache.inputs"):
        report = publish(spark, settings, INTERVAL, PublishConfig(partitions=3))
    assert (report.status, report.version) == ("published", version)
    paths = [m for m in caplog.messages if "shuffled" in m]
    return version_dump(r, prefix, version), paths[0]


def test_rows_in_any_order_publish_the_same_version_and_bytes(spark, settings_for, redis_url,
                                                              key_prefix, caplog, monkeypatch):
    settings = settings_for(redis_url)
    table = embeddings_table(users=12, per_user=6, seed=4)
    r = redis.Redis.from_url(redis_url)
    write_embeddings(settings, table)
    first = publish(spark, settings, INTERVAL, PublishConfig())
    before = version_dump(r, key_prefix, first.version)
    assert len(before) == first.keys and sum(len(v) for v in before.values()) == table.num_rows
    split = _grouped_files(table, seed=5)
    dump, path = _republish(spark, settings, r, key_prefix, first.version, split, caplog)
    assert dump == before and path == "exact: 1 scattered users' rows shuffled by user"
    rng = np.random.default_rng(6)
    scrambled = table.take(rng.permutation(table.num_rows))
    files = [scrambled.slice(0, 30), scrambled.slice(30)]
    monkeypatch.setattr(publish_module, "SCATTERED_LIMIT", 5)  # 12 scattered users: too many
    dump, path = _republish(spark, settings, r, key_prefix, first.version, files, caplog)
    assert dump == before and path == "exact: every row shuffled by user (12 scattered users)"


def test_writer_refuses_a_user_in_two_runs(redis_url, key_prefix):
    target = WriteTarget(redis_url, key_prefix, "20260105T100000Z-0000000000", 2, 60, 4)
    values = np.frombuffer(b"\x00\x3c\x00\x3c" * 4, np.uint8).reshape(4, 4)
    rows = (np.array([1, 1, 2, 1]), np.array([1, 2, 3, 4]), values)
    with pytest.raises(PublishError, match="more than one run"):
        write_rows([rows], target)
