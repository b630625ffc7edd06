"""Publish throughput: pairs/s of a whole publish against a raw pipelined write of the same bytes.

* ``raw``: one Python process writes the same pairs with redis-py (hiredis) pipelines of
  ``HSET key item value ...`` + ``EXPIRE`` per user, 50 users per round trip; the mappings are
  built before the clock starts. Run before and after the publish; the floor is their mean.
* ``publish``: ``solaris_lib.cache.publish.publish`` on the same embeddings partition, in a
  local[2] Spark session that has already run one small publish (the session start and the
  first, cold publish are reported apart). It includes everything a publish does: the
  survey pass (the Spark tasks read the parquet slices with pyarrow: row checks, content
  digest, memory estimate), the write (the tasks read their slices again; a shuffle by user
  only for users whose rows are not one run of one slice), the server-side count and the
  read-back check, the alias switch.

``ratio`` = publish pairs/s / raw pairs/s; ``write_phase_ratio`` counts the write phase only.
``phases_s`` has the publish's phases (``inspect``, ``estimate``, ``write``, ``switch``) and,
inside ``inspect``, the slowest survey task's time (``survey_task_max``, direct read path);
inside ``write``, the slowest task's time in the writer (``write_task_max``) and in its count
and read-back (``check_task_max``).
Both use one private redis-server with ``infra/redis.conf``'s hash settings, emptied between
runs. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
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
TARGET_RATIO = 0.5


def make_table(users: int, per_user: int, dim: int, seed: int, first_user: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    user_ids = np.repeat(np.arange(first_user, first_user + users, dtype=np.int64), per_user)
    items = rng.integers(10**7, 10**8, len(user_ids), dtype=np.int64)
    values = rng.standard_normal((len(user_ids), dim)).astype("<f2")
    return pa.table({"user_id": user_ids, "item_id": items,
                     "model_version": pa.array(["bench"] * len(user_ids)),
                     "embedding": binary_column(values)})


def write_partition(settings, table: pa.Table, interval: Interval) -> None:
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, interval)
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet")


def raw_write(url: str, table: pa.Table, ttl_s: int, users_per_round: int = 50) -> float:
    """Seconds for redis-py pipelines to write every pair (one hash per user) plus EXPIREs."""
    users = table["user_id"].to_numpy()
    items = table["item_id"].to_numpy()
    values = table["embedding"].to_pylist()
    bounds = np.flatnonzero(np.r_[True, users[1:] != users[:-1], True])
    mappings = [(f"raw:e:v:{{{users[s]}}}", dict(zip(items[s:e].tolist(), values[s:e],
                                                      strict=True)))
                for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    client = redis.Redis.from_url(url)
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for index, (key, mapping) in enumerate(mappings, 1):
        pipe.hset(key, mapping=mapping)
        pipe.expire(key, ttl_s)
        if index % users_per_round == 0:
            pipe.execute()
    pipe.execute()
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--per-user", type=int, default=200)
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

    table = make_table(options.users, options.per_user, options.dim, seed=1)
    pairs = table.num_rows
    limits = HashLimits.from_redis_conf((ROOT / "infra" / "redis.conf").read_text())
    with RedisServer(args=("--maxmemory", "6gb", *limits.server_args())) as server:
        settings = load_settings(data_root=str(work / "data"), redis_url=server.url,
                                 redis_key_prefix="bench")
        write_partition(settings, table, INTERVAL)
        warm_interval = INTERVAL.previous()
        write_partition(settings, make_table(20, 10, options.dim, seed=2), warm_interval)
        started = time.perf_counter()
        spark = get_spark("solaris-bench-cache-fill", master="local[2]")
        spark_start_s = time.perf_counter() - started
        config = PublishConfig(partitions=options.partitions, ttl_s=3600)
        started = time.perf_counter()
        publish(spark, settings, warm_interval, config)
        cold_small_s = time.perf_counter() - started
        flush = redis.Redis.from_url(server.url)
        flush.flushall()
        raw_first = raw_write(server.url, table, 3600)
        flush.flushall()
        started = time.perf_counter()
        report = publish(spark, settings, INTERVAL, config)
        publish_s = time.perf_counter() - started
        flush.flushall()
        raw_second = raw_write(server.url, table, 3600)
        spark.stop()
    raw_s = (raw_first + raw_second) / 2
    raw_rate, publish_rate = pairs / raw_s, report.pairs / publish_s
    write_rate = report.pairs / report.seconds["write"]
    return {
        "pairs": pairs, "users": options.users, "dim": options.dim,
        "partitions": options.partitions,
        "raw_pairs_per_s": round(raw_rate), "raw_runs_s": [round(raw_first, 3),
                                                           round(raw_second, 3)],
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
