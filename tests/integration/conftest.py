"""A tiny simulated world with trained models, run through the real DAGs (Spark local mode,
a real Redis, Airflow's metadata DB in the test session's AIRFLOW_HOME).

Shared by tests/integration/orchestration and tests/integration/reliability: defined once here
so the session builds it once."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from solaris_lib.intervals import Interval
from solaris_lib.layout import RETRIEVAL
from solaris_lib.simulate.config import WorldConfig

ROOT = Path(__file__).resolve().parents[2]
WORLD = WorldConfig(users=150, items=200, days=3, seed=11)
FIRST = Interval(WORLD.start + timedelta(days=2, hours=10), WORLD.start + timedelta(days=2, hours=11))


def airflow_cli(*args: str) -> None:
    airflow = str(Path(sys.executable).with_name("airflow"))
    done = subprocess.run([airflow, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="session")
def airflow_db():
    """Airflow's metadata DB migrated, with the pool that bounds Spark jobs (each xdist worker
    has its own DB, tests/conftest.py; a file lock still keeps two migrations of one DB, e.g.
    under a caller's AIRFLOW_HOME, from racing)."""
    import fcntl

    with open(Path(os.environ["AIRFLOW_HOME"]) / "migrate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        airflow_cli("db", "migrate")
        airflow_cli("pools", "set", "solaris_spark", "2", "SOLARIS Spark jobs")


def run_dag(dag_id: str, run_after: datetime, **test_kwargs):
    """One real run of a repository DAG for the interval ending at ``run_after`` (``test_kwargs``
    go to ``dag.test``, e.g. ``mark_success_pattern``)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    run = bag.dags[dag_id].test(logical_date=run_after, **test_kwargs)
    assert run.data_interval_end == run_after
    return run


def published_content(url: str, prefix: str, version: str) -> dict[bytes, dict]:
    """Every key of one cache version under ``prefix`` with its hash or string value (other
    sessions on the same Redis may publish the same version id under their own prefix)."""
    import redis

    client = redis.Redis.from_url(url)
    content = {}
    for key in client.scan_iter(match=f"{prefix}:*{version}*", count=1000):
        kind = client.type(key)
        content[key] = client.hgetall(key) if kind == b"hash" else client.get(key)
    client.close()
    return content


@dataclass
class Pipeline:
    data_root: Path
    redis_url: str
    key_prefix: str


@dataclass
class Published:
    """The served cache version after the first precompute run of FIRST, and its content."""

    version: str
    content: dict[bytes, dict]


@contextmanager
def trained_world(data_root: Path, redis_url: str, prefix: str, trained_at: datetime,
                  copy_of: Path | None = None, copied: tuple[str, ...] = (), **extra: str):
    """The tiny world simulated under ``data_root`` and both training DAGs run at
    ``trained_at``, with SOLARIS_* variables (plus ``extra``) pointing every job at it; the
    variables are restored and every Redis key under ``prefix`` deleted afterwards.

    ``copy_of`` (another trained world's data root) copies its logs and retrieval factors
    instead of simulating and training them again (and the folders named in ``copied``, e.g.
    its mined and speculated partitions): only the foundation DAG runs."""
    import shutil

    import redis

    from solaris_lib.simulate.world import Simulator

    env = {"SOLARIS_DATA_ROOT": str(data_root), "SOLARIS_REDIS_URL": redis_url,
           "SOLARIS_REDIS_KEY_PREFIX": prefix, "SOLARIS_FOUNDATION_PRESET": "test",
           "SOLARIS_SPECULATE_BUDGET_PER_USER": "20", "SOLARIS_FALLBACK_CLUSTERS": "8", **extra}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        dags = ["solaris_train_foundation"]
        if copy_of is None:
            Simulator(WORLD).run(str(data_root / "logs"))
            dags.insert(0, "solaris_train_retrieval")
        else:
            for folder in ("logs", RETRIEVAL, *copied):
                shutil.copytree(copy_of / folder, data_root / folder)
        for dag_id in dags:
            assert run_dag(dag_id, trained_at).state == "success", dag_id
        yield Pipeline(data_root, redis_url, prefix)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start:start + 500])


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory, redis_url, airflow_db):
    """The tiny world simulated, retrieval factors and a foundation model trained by the
    training DAGs; SOLARIS_* variables point every job at it for the whole session."""
    data_root = tmp_path_factory.mktemp("pipeline") / "data"
    with trained_world(data_root, redis_url, f"solaris-test-{uuid.uuid4().hex[:10]}",
                       FIRST.start) as world:
        yield world


@pytest.fixture(scope="session")
def precompute_first(pipeline) -> Published:
    """One real ``dag.test()`` run of the precompute DAG for FIRST (sensor, mine, speculate,
    infer, evaluate, publish as spark-submit jobs); shared by the tests that check what it
    served and by the multi-node run of the next interval through the scheduler."""
    import redis

    from solaris_lib.cache.format import misses_key
    from solaris_lib.client import SolarisClient
    from tests.budgets import TEST_TIMEOUT_MS

    # misses a ranker reported during FIRST, of users no log knows (no candidate comes of them;
    # the run counts them, and the next interval's run reads them again: test_multinode)
    r = redis.Redis.from_url(pipeline.redis_url)
    start_ms = int(FIRST.start.timestamp() * 1000)
    for k in range(3):
        r.xadd(misses_key(pipeline.key_prefix), {"user": str(10**15 + k), "items": "1,2",
                                                  "ts": str(start_ms + k)}, id=f"{start_ms + k}-0")
    r.close()
    assert run_dag("solaris_precompute", FIRST.end).state == "success"
    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        version = client.version
    assert version is not None and version.startswith(FIRST.key)
    content = published_content(pipeline.redis_url, pipeline.key_prefix, version)
    assert content
    return Published(version, content)
