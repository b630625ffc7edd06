"""Publish throughput: a whole publish against a raw pipelined write of the same bytes.

The interval has what every DAG run publishes: the exact embeddings and the hierarchical
fallback's tables (one cluster value per user and cluster, the item -> cluster table and the
item priors), so the publish takes the DAG's code path (``jobs/publish_cache.py`` ->
``solaris_lib.cache.publish.publish``).

* ``raw``: one Python process writes the same keys and values with redis-py (hiredis)
  pipelines: per user ``HSET`` + ``EXPIRE`` of each bucket hash and of its cluster hash, 50 users
  per round trip, then the fallback's chunk strings; the mappings are built before the clock
  starts. Run before and after the publish; the floor is their mean.
* ``publish``: ``publish`` on the same partition, in a local[2] Spark session that has already
  run one small publish (the session start and that first publish are reported apart). It
  includes everything a publish does: the survey (Spark tasks read the parquet slices with
  pyarrow: row checks, content digest, memory estimate) of both tables, the driver's item
  tables, the write (the tasks read their slices again), the server-side count and the
  read-back check, the alias switch.

``ratio`` = publish pairs/s / raw pairs/s (pairs: exact and cluster values);
``write_phase_ratio`` counts the write phase only. ``cpu_ratio`` = raw CPU seconds / publish
CPU seconds (this process and all its children: the JVM, Spark's Python workers, the
redis-server), the same comparison without the other jobs on the machine: on a loaded
machine the wall-clock ratio follows it. ``phases_s`` has the publish's phases
(``inspect``, ``estimate``, ``write``, ``switch``) with the slowest survey task
(``survey_task_max``) and the slowest writing task's time in the writer (``write_task_max``)
and in its count and read-back (``check_task_max``). Both use one private redis-server with
``infra/redis.conf``'s hash settings, emptied between runs. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import redis

from solaris_lib.cache.format import (
    bucket_key,
    bucket_of,
    cluster_key,
    item_clusters_key,
    item_priors_key,
    pack_item_clusters,
    pack_item_priors,
)
from solaris_lib.cache.memory import HashLimits
from solaris_lib.cache.pairs import binary_column
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.config import load_settings
from solaris_lib.devtools.redis_server import RedisServer
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder

log = logging.getLogger("bench.cache_fill")
ROOT = Path(__file__).resolve().parents[1]
INTERVAL = Interval(datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))
TARGET_RATIO = 1.0
PREFIX = "bench"


def make_tables(users: int, per_user: int, items: int, clusters: int, dim: int, seed: int
                ) -> dict[str | None, pa.Table]:
    """The interval's four tables: ``per_user`` items of a catalogue of ``items`` per user,
    ``clusters`` cluster values per user, the catalogue's item -> cluster table and priors."""
    rng = np.random.default_rng(seed)
    user_ids = np.repeat(np.arange(users, dtype=np.int64), per_user)
    catalogue = np.sort(rng.choice(10**8, items, replace=False)).astype(np.int64)
    chosen = np.concatenate([np.sort(rng.choice(catalogue, per_user, replace=False))
                             for _ in range(users)])

    def embeddings(n: int) -> pa.Array:
        return binary_column(rng.standard_normal((n, dim)).astype("<f2"))

    def versions(n: int) -> pa.Array:
        return pa.array(["bench"] * n)

    cluster_users = np.repeat(np.arange(users, dtype=np.int64), clusters)
    return {
        None: pa.table({"user_id": user_ids, "item_id": chosen,
                        "model_version": versions(len(chosen)),
                        "embedding": embeddings(len(chosen))}),
        "cluster": pa.table({"user_id": cluster_users,
                             "cluster_id": np.tile(np.arange(clusters, dtype=np.int32), users),
                             "model_version": versions(len(cluster_users)),
                             "embedding": embeddings(len(cluster_users))}),
        "item_clusters": pa.table({"item_id": catalogue, "cluster_id": rng.integers(
            0, clusters, items).astype(np.int32)}),
        "item_prior": pa.table({"item_id": catalogue, "model_version": versions(items),
                                "embedding": embeddings(items)}),
    }


def write_tables(settings, tables: dict[str | None, pa.Table], interval: Interval) -> None:
    layout = DataLayout.from_settings(settings)
    for name, table in tables.items():
        with atomic_folder(layout.output(EMBEDDINGS, interval, name)) as staging:
            pq.write_table(table, f"{staging}/part-00000.parquet")


def raw_commands(tables: dict, version: str, buckets: int, ttl_s: int) -> list[list[tuple]]:
    """Per user, its HSETs and EXPIREs (the publish's keys and values), then the chunks."""
    exact, cluster = tables[None], tables["cluster"]
    per_user: dict[int, list[tuple]] = {}
    for table, kind in ((exact, "item_id"), (cluster, "cluster_id")):
        users = table["user_id"].to_numpy()
        ids = table[kind].to_numpy().astype(np.int64)
        values = table["embedding"].to_pylist()
        parts = bucket_of(ids, buckets) if kind == "item_id" else np.full(len(ids), -1)
        order = np.lexsort((ids, parts, users))
        bounds = np.flatnonzero(np.r_[True, (users[order][1:] != users[order][:-1])
                                      | (parts[order][1:] != parts[order][:-1]), True])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            rows = order[a:b]
            user, part = int(users[rows[0]]), int(parts[rows[0]])
            key = (bucket_key(PREFIX, version, user, part) if part >= 0
                   else cluster_key(PREFIX, version, user))
            mapping = dict(zip(ids[rows].tolist(), [values[r] for r in rows], strict=True))
            per_user.setdefault(user, []).extend([("hset", key, mapping), ("expire", key)])
    chunks = [(item_clusters_key(PREFIX, version, k), c) for k, c in enumerate(
        pack_item_clusters(tables["item_clusters"]["item_id"].to_numpy(),
                           tables["item_clusters"]["cluster_id"].to_numpy()))]
    prior_values = np.stack([np.frombuffer(v, np.uint8) for v in
                             tables["item_prior"]["embedding"].to_pylist()])
    chunks += [(item_priors_key(PREFIX, version, k), c) for k, c in enumerate(
        pack_item_priors(tables["item_prior"]["item_id"].to_numpy(), prior_values))]
    return [*per_user.values(), [("set", key, chunk) for key, chunk in chunks]]


def raw_write(url: str, commands: list[list[tuple]], ttl_s: int, users_per_round: int = 50
              ) -> float:
    """Seconds for redis-py pipelines to run ``commands`` (``users_per_round`` users each)."""
    client = redis.Redis.from_url(url)
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for index, user in enumerate(commands, 1):
        for name, key, *value in user:
            if name == "hset":
                pipe.hset(key, mapping=value[0])
            elif name == "expire":
                pipe.expire(key, ttl_s)
            else:
                pipe.set(key, value[0], ex=ttl_s)
        if index % users_per_round == 0:
            pipe.execute()
    pipe.execute()
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and every live descendant (``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += (int(stats[pid][11]) + int(stats[pid][12])) / ticks
        todo.extend(children.get(pid, []))
    return total


def timed(action) -> tuple[object, float, float]:
    """``action()``'s result, wall seconds and CPU seconds (:func:`cpu_seconds`)."""
    cpu, started = cpu_seconds(), time.perf_counter()
    result = action()
    return result, time.perf_counter() - started, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--per-user", type=int, default=200)
    parser.add_argument("--items", type=int, default=20000, help="the item catalogue")
    parser.add_argument("--clusters", type=int, default=36, help="cluster values per user")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=2)
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        stream=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="solaris-bench-fill-"))
    try:
        result = run(options, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(json.dumps(result) + "\n")


def run(options, work: Path) -> dict:
    from solaris_lib.sparkutil import get_spark

    tables = make_tables(options.users, options.per_user, options.items, options.clusters,
                         options.dim, seed=1)
    small = make_tables(20, 10, 100, 4, options.dim, seed=2)
    limits = HashLimits.from_redis_conf((ROOT / "infra" / "redis.conf").read_text())
    config = PublishConfig(partitions=options.partitions, ttl_s=3600)
    with RedisServer(args=("--maxmemory", "6gb", *limits.server_args())) as server:
        settings = load_settings(data_root=str(work / "data"), redis_url=server.url,
                                 redis_key_prefix=PREFIX)
        write_tables(settings, tables, INTERVAL)
        warm_interval = INTERVAL.previous()
        write_tables(settings, small, warm_interval)
        started = time.perf_counter()
        spark = get_spark("solaris-bench-cache-fill", master="local[2]")
        spark_start_s = time.perf_counter() - started
        started = time.perf_counter()
        publish(spark, settings, warm_interval, config)
        cold_small_s = time.perf_counter() - started
        flush = redis.Redis.from_url(server.url)
        # keys as long as the publish's (a version id has a fixed length)
        commands = raw_commands(tables, f"{INTERVAL.key}-{'0' * 10}", config.buckets, 3600)
        raw_runs = []
        for run_publish in (False, True, False):
            flush.flushall()
            if run_publish:
                report, publish_s, publish_cpu = timed(
                    lambda: publish(spark, settings, INTERVAL, config))
            else:
                raw_runs.append(timed(lambda: raw_write(server.url, commands, 3600))[1:])
        spark.stop()
    result = summarize(options, report, publish_s, [r[0] for r in raw_runs], spark_start_s,
                       cold_small_s)
    raw_cpu = sum(r[1] for r in raw_runs) / len(raw_runs)
    result.update(publish_cpu_s=round(publish_cpu, 2), raw_cpu_s=round(raw_cpu, 2),
                  cpu_ratio=round(raw_cpu / publish_cpu, 3), load_average=os.getloadavg()[0])
    return result


def summarize(options, report, publish_s: float, raw_runs: list[float], spark_start_s: float,
              cold_small_s: float) -> dict:
    pairs = report.pairs + report.cluster_pairs
    raw_rate = pairs / (sum(raw_runs) / len(raw_runs))
    publish_rate = pairs / publish_s
    write_rate = pairs / report.seconds["write"]
    return {
        "pairs": report.pairs, "cluster_pairs": report.cluster_pairs, "users": options.users,
        "dim": options.dim, "buckets": report.buckets, "partitions": options.partitions,
        "raw_pairs_per_s": round(raw_rate), "raw_runs_s": [round(r, 3) for r in raw_runs],
        "publish_pairs_per_s": round(publish_rate), "publish_s": round(publish_s, 3),
        "ratio": round(publish_rate / raw_rate, 3),
        "write_phase_pairs_per_s": round(write_rate),
        "write_phase_ratio": round(write_rate / raw_rate, 3),
        "phases_s": report.seconds, "spark_start_s": round(spark_start_s, 2),
        "first_small_publish_s": round(cold_small_s, 2),
        "target_ratio": TARGET_RATIO, "target_met": publish_rate / raw_rate >= TARGET_RATIO,
    }


if __name__ == "__main__":
    main()
