"""Two publishers of one interval, and a zombie: a served version's manifest is never rewritten
and its keys never get a TTL back.

The victim is ``solaris publish-cache`` in its own process (its own Spark), SIGKILLed as soon
as its write has begun (its manifest and first user hash exist); the survivor runs in this
process and waits at a barrier at the start of its own write until the victim is dead, then
publishes. Afterwards a late writer of the same version (what an executor of a publisher that
passed its checks before the switch does) rewrites the rows and the manifest: nothing a reader
sees changes. Real Redis, real Spark, real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import redis

from solaris_lib.cache.format import RETAINED_TTL_S, STATE_WRITING, alias_key
from solaris_lib.cache.pairs import fixed_width_values
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.cache.server import CacheServer
from solaris_lib.cache.writer import WriteTarget, write_rows
from solaris_lib.client import SolarisClient
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    write_embeddings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def start_victim(settings, log_path) -> subprocess.Popen:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")},
           "SOLARIS_DATA_ROOT": settings.data_root, "SOLARIS_REDIS_URL": settings.redis_url,
           "SOLARIS_REDIS_KEY_PREFIX": settings.redis_key_prefix}
    with open(log_path, "w") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "solaris_lib.cli", "publish-cache",
             "--start", INTERVAL.start.isoformat(), "--end", INTERVAL.end.isoformat()],
            env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def wait_until_writing(r, prefix: str, victim: subprocess.Popen, log_path) -> str:
    """The victim's version once its manifest and a first user hash exist; the victim is left
    stopped (SIGSTOP on its process group). From its log line before the write on, the victim
    runs only in short SIGCONT windows between the looks at the server: a look (SCANs of the
    shared database) can take longer on a loaded machine than the victim's whole write, which
    would then switch the alias before the kill."""
    deadline = time.monotonic() + 300
    while "publishable rows" not in log_path.read_text():
        assert victim.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "the victim never reached its write"
        time.sleep(0.002)
    while time.monotonic() < deadline:
        os.killpg(victim.pid, signal.SIGSTOP)
        manifests = list(r.scan_iter(match=f"{prefix}:m:*", count=10000))
        if manifests:
            version = manifests[0].decode().split(":m:", 1)[1]
            if next(r.scan_iter(match=f"{prefix}:e:{version}:*", count=10000), None):
                return version
        os.killpg(victim.pid, signal.SIGCONT)
        assert victim.poll() is None, log_path.read_text()[-3000:]
        time.sleep(0.005)
    pytest.fail("the victim never began writing")


def test_two_publishers_one_killed_mid_write_then_a_zombie_writer(spark, settings_for,
                                                                   redis_url, key_prefix,
                                                                   tmp_path):
    settings = settings_for(redis_url)
    r = redis.Redis.from_url(redis_url)
    table = embeddings_table(users=400, per_user=200, dim=8)
    write_embeddings(settings, table)
    barrier = threading.Barrier(2, timeout=600)
    outcome: dict = {}

    def survivor() -> None:
        def hold(phase: str) -> None:
            if phase == "write":
                barrier.wait()
        try:
            outcome["report"] = publish(spark, settings, INTERVAL, PublishConfig(),
                                        on_phase=hold)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc
            barrier.abort()

    log_path = tmp_path / "victim.log"
    victim = start_victim(settings, log_path)
    version = wait_until_writing(r, key_prefix, victim, log_path)
    os.killpg(victim.pid, signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    assert r.get(alias_key(key_prefix)) is None  # killed before its switch
    assert r.hget(f"{key_prefix}:m:{version}", "state") == STATE_WRITING.encode()
    thread = threading.Thread(target=survivor)
    thread.start()
    barrier.wait()  # the survivor is at its write: the victim is dead, its version half written
    thread.join(timeout=600)
    assert "error" not in outcome, outcome.get("error")
    report = outcome["report"]
    assert (report.status, report.version, report.pairs) == ("published", version, 80_000)

    def served_correctly() -> None:
        with SolarisClient.from_url(redis_url, key_prefix=key_prefix,
                                    timeout_ms=TEST_TIMEOUT_MS) as client:
            assert client.version == version
            by_user: dict[int, list] = {}
            for (user, item), want in expected_vectors(table).items():
                by_user.setdefault(user, []).append((item, want))
            for user, rows in by_user.items():
                result = client.lookup(user, [item for item, _ in rows])
                assert result.hit.all()
                assert np.array_equal(result.embeddings, np.stack([w for _, w in rows]))
        keys = list(r.scan_iter(match=f"{key_prefix}:*{version}*", count=10000))
        assert keys and all(r.ttl(k) > RETAINED_TTL_S - 3600 for k in keys)

    served_correctly()
    # a zombie: rows and manifest of the same version written again after the switch
    with CacheServer(redis_url, key_prefix) as server:
        complete = server.manifest(version)
        assert not server.write_manifest(replace(complete, state=STATE_WRITING))
    users = table["user_id"].to_numpy()
    order = np.argsort(users, kind="stable")
    values = fixed_width_values(table["embedding"], 16)
    target = WriteTarget(redis_url, key_prefix, version, 8, ttl_s=5, buckets=4)
    stats = write_rows([(users[order], table["item_id"].to_numpy()[order], values[order])],
                       target)
    assert stats["pairs"] == stats["fields_on_server"] == 80_000
    assert r.hget(f"{key_prefix}:m:{version}", "state") == b"complete"
    served_correctly()
