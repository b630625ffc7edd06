"""Helpers for the cache's integration tests: embeddings tables, versions written straight
from the spec with redis-py (independently of the publisher), private servers and a cluster."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.config import load_settings
from solaris_lib.devtools.redis_cluster import RedisClusterServers
from solaris_lib.devtools.redis_server import RedisServer
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder

INTERVAL = Interval(datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))
PRIVATE_LIMITS = ("--maxmemory", "256mb")  # a runaway test must not eat the shared machine


def embeddings_table(users: int, per_user: int, dim: int = 8, seed: int = 0,
                     model_version: str = "m1", first_user: int = 0) -> pa.Table:
    """``users`` x ``per_user`` distinct pairs with random fp16 embeddings (contract columns)."""
    rng = np.random.default_rng(seed)
    user_ids = np.repeat(np.arange(first_user, first_user + users, dtype=np.int64), per_user)
    items = np.concatenate([rng.choice(10**7, per_user, replace=False) for _ in range(users)])
    values = rng.standard_normal((len(user_ids), dim)).astype("<f2")
    return pa.table({
        "user_id": user_ids, "item_id": items.astype(np.int64),
        "model_version": pa.array([model_version] * len(user_ids), pa.string()),
        "embedding": pa.array([row.tobytes() for row in values], pa.binary()),
    })


def write_embeddings(settings, table: pa.Table, interval: Interval = INTERVAL) -> str:
    """Write ``table`` as the complete embeddings partition of ``interval``."""
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, interval)
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet")
    return path


def expected_vectors(table: pa.Table) -> dict[tuple[int, int], np.ndarray]:
    """(user, item) -> float32 values, decoded from the table with plain numpy."""
    rows = zip(table["user_id"].to_pylist(), table["item_id"].to_pylist(),
               table["embedding"].to_pylist(), strict=True)
    return {(u, i): np.frombuffer(e, "<f2").astype(np.float32) for u, i, e in rows}


def later(interval: Interval, steps: int = 1) -> Interval:
    return interval.shift(timedelta(hours=steps))


@pytest.fixture
def settings_for(tmp_path, key_prefix):
    """Settings on a temporary data root for a given Redis URL (shared one by default)."""
    def build(url: str, prefix: str = key_prefix):
        return load_settings(data_root=str(tmp_path / "data"), redis_url=url,
                             redis_key_prefix=prefix)
    return build


@pytest.fixture
def private_redis():
    """A private redis-server (started here, stopped after the test) with a memory cap."""
    servers = []

    def start(*args: str) -> RedisServer:
        server = RedisServer(args=(*PRIVATE_LIMITS, *args)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def redis_cluster():
    """A real 3-master Redis Cluster on loopback ports (no replicas; every master must be up
    for the cluster to answer, Redis' default); yields (its redis+cluster:// URL, servers)."""
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is needed to create a cluster")
    with RedisClusterServers(masters=3, replicas=0, require_full_coverage=True) as cluster:
        yield cluster.url, cluster.servers
