"""Faults beyond those of tests/integration/cache/test_faults.py: a full disk under an output
partition, a Redis restart (with its data persisted) under a stream of lookups, and a publish
killed mid-write then retried as the DAG task would be.

Already covered there: a server paused or killed (then started empty and refilled) under
lookups, a server killed during a publish, readers during an alias switch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from solaris_lib.cache.errors import PublishError
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import Backoff, CircuitBreaker, SolarisClient
from solaris_lib.errors import OutputWriteError
from solaris_lib.logs.validate import validate_file
from solaris_lib.storage import SUCCESS_MARKER, atomic_folder, is_complete
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    later,
    write_embeddings,
)
from tests.integration.cache.test_client import put_version, wait_for
from tests.integration.cache.test_faults import _Killer

pytestmark = pytest.mark.integration
VERSION = "20260105T100000Z-aaaaaaaaaa"


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs mounted for the test (root and mount(8) needed; skipped otherwise)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    folder = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def noise(rows: int, seed: int = 0) -> pa.Table:
    """Incompressible columns: ``rows`` x 16 bytes of random data."""
    rng = np.random.default_rng(seed)
    return pa.table({"a": rng.integers(0, 2**62, rows), "b": rng.standard_normal(rows)})


def test_disk_full_fails_cleanly_and_keeps_the_previous_partition(small_disk):
    final = small_disk / "embeddings" / "interval=20260105T100000Z"
    small = noise(1000)
    with atomic_folder(str(final)) as staging:
        pq.write_table(small, f"{staging}/part-0.parquet", compression="none")
    with pytest.raises(OutputWriteError) as caught:
        with atomic_folder(str(final)) as staging:
            pq.write_table(noise(1_000_000, seed=1), f"{staging}/part-0.parquet",
                           compression="none")  # 16 MB on a 4 MiB disk
    message = str(caught.value)
    assert str(final) in message and "No space left on device" in message
    assert caught.value.exit_code == 7
    assert is_complete(str(final)) and pq.read_table(final / "part-0.parquet").equals(small)
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]  # no staging left


def test_disk_full_on_a_first_write_leaves_no_partition(small_disk):
    final = small_disk / "cache" / "quarantine" / "interval=20260105T100000Z"
    with pytest.raises(OutputWriteError):
        with atomic_folder(str(final)) as staging:
            pq.write_table(noise(1_000_000), f"{staging}/part-0.parquet", compression="none")
    assert not final.exists() and list(final.parent.iterdir()) == []


def test_disk_full_under_a_spark_write(small_disk, spark):
    final = small_disk / "speculated" / "interval=20260105T100000Z"
    frame = spark.range(0, 1_500_000).selectExpr("id", "rand(7) as x", "uuid() as u")
    with pytest.raises(OutputWriteError, match="No space left on device"):
        with atomic_folder(str(final)) as staging:
            frame.write.mode("overwrite").parquet(staging)
    assert not final.exists() and not (final / SUCCESS_MARKER).exists()
    assert list(final.parent.iterdir()) == []


def test_client_recovers_from_a_restart_with_persisted_data(private_redis):
    server = private_redis("--appendonly", "yes", "--appendfsync", "always")
    data = {u: {i: [u, i] for i in range(4)} for u in range(10)}
    put_version(redis.Redis.from_url(server.url), "p", VERSION, data, dim=2)
    outcomes, crashes, stop = [], [], threading.Event()
    breaker = CircuitBreaker(failure_threshold=1, backoff=Backoff(initial_ms=20, max_ms=200))
    # 250 ms: short enough that the outage is seen at once, long enough that a busy machine's
    # stall of a healthy server is not taken for one
    with SolarisClient.from_url(server.url, key_prefix="p", timeout_ms=250,
                                breaker=breaker) as client:
        def reader():
            user = 0
            while not stop.is_set():
                try:
                    result = client.lookup(user % 10, [0, 1, 2, 3])
                except Exception as exc:  # noqa: BLE001 - the test is that nothing escapes
                    crashes.append(exc)
                    return
                want = np.array([[user % 10, i] for i in range(4)], np.float32)
                outcomes.append((result.error, bool(result.hit.all()), bool(result.hit.any()),
                                 result.hit.all() and np.array_equal(result.embeddings, want)))
                user += 1

        thread = threading.Thread(target=reader)
        thread.start()
        wait_for(lambda: len(outcomes) > 50)
        before = len(outcomes)
        server.stop()  # SIGTERM: the append-only file is complete
        down_at = len(outcomes)
        wait_for(lambda: len(outcomes) > down_at + 100)
        server.start()  # same port and folder: the data is reloaded, nothing is rewritten
        up_at = len(outcomes)
        wait_for(lambda: sum(o[1] for o in outcomes[up_at:]) > 50)
        stop.set()
        thread.join()
        stats = client.stats()
    assert crashes == []
    assert all(o[1] and o[3] for o in outcomes[:before])
    failed = [o for o in outcomes if o[0] is not None]
    assert failed and all(not o[2] for o in failed)
    assert {o[0] for o in failed} <= {"connection", "timeout", "circuit_open"}
    # the data is persisted: every lookup is the stored bytes or a flagged error, never a
    # silent miss (the wait saw more than 50 hits after the restart)
    assert all(o[0] is not None or o[3] for o in outcomes) and client.version == VERSION
    assert stats.breaker_opens >= 1 and stats.version_switches == 1


@pytest.mark.slow
def test_publish_killed_mid_write_then_retried_like_the_dag_task(spark, settings_for,
                                                                 private_redis):
    server = private_redis("--appendonly", "yes", "--appendfsync", "always")
    settings = settings_for(server.url)
    prefix = settings.redis_key_prefix
    write_embeddings(settings, embeddings_table(users=20, per_user=5, dim=8, seed=1))
    old = publish(spark, settings, INTERVAL, PublishConfig())
    new_table = embeddings_table(users=500, per_user=20, dim=8, seed=2)
    write_embeddings(settings, new_table, later(INTERVAL))
    killer = _Killer(server)
    with pytest.raises(PublishError) as caught:
        publish(spark, settings, later(INTERVAL), PublishConfig(),
                on_phase=lambda phase: killer.start() if phase == "write" else None)
    assert killer.killed_with_keys >= 1 and "still served" in str(caught.value)
    server.start()  # Redis back with its append-only file; the task is retried
    assert redis.Redis.from_url(server.url).get(f"{prefix}:alias").decode() == old.version
    retried = publish(spark, settings, later(INTERVAL), PublishConfig())
    assert retried.status == "published" and retried.previous_version == old.version
    assert retried.version in str(caught.value)  # the retry rewrote the same version id
    assert retried.pairs == new_table.num_rows
    with SolarisClient.from_url(server.url, key_prefix=prefix, timeout_ms=1000) as client:
        assert client.version == retried.version
        want = expected_vectors(new_table)
        for user in (0, 250, 499):
            items = [item for (u, item) in want if u == user]
            result = client.lookup(user, items)
            assert result.hit.all()
            assert np.array_equal(result.embeddings, np.stack([want[(user, i)] for i in items]))


def test_disk_full_while_quarantining_log_rows(small_disk, tmp_path):
    logs = tmp_path / "logs"
    folder = logs / "dt=2026-01-05" / "hour=10"
    folder.mkdir(parents=True)
    rows = 300_000
    rng = np.random.default_rng(3)
    table = pa.table({
        "request_id": pa.array(rng.integers(0, 2**62, rows).astype(str)),
        "ts": pa.array(np.full(rows, 1767607200_000000), pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(np.full(rows, -1), pa.int64()),  # every row is quarantined
        "item_id": pa.array(rng.integers(0, 2**62, rows), pa.int64()),
    })
    pq.write_table(table, folder / "part-0.parquet")
    with pytest.raises(OutputWriteError, match="quarantining 300000 rows") as caught:
        validate_file(str(folder / "part-0.parquet"), str(logs), str(small_disk / "_q"))
    assert caught.value.exit_code == 7
    assert [p for p in small_disk.rglob("*") if p.is_file()] == []  # no partial file left
