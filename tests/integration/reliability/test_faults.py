"""Faults beyond those of tests/integration/cache/test_faults.py: a full disk under an output
partition, and a Redis restart (with its data persisted) under a stream of lookups.

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

from solaris_lib.client import Backoff, CircuitBreaker, SolarisClient
from solaris_lib.errors import OutputWriteError
from solaris_lib.storage import SUCCESS_MARKER, atomic_folder, is_complete
from tests.integration.cache.test_client import put_version, wait_for

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
    with SolarisClient.from_url(server.url, key_prefix="p", timeout_ms=50,
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
    assert outcomes[-1][1] and outcomes[-1][3] and client.version == VERSION
    assert stats.breaker_opens >= 1 and stats.version_switches == 1
