"""Lookup latency with the hierarchical fallback level against the same lookup without it.

One call = one user and 200 items of dimension 64 (fp16), after warm-up, over ``--calls``
calls, on one private redis-server with ``infra/redis.conf``'s hash settings. The same pairs
are written twice by the publisher's writer, under two key prefixes:

* ``plain``: exact (user, item) values only (a version without the level);
* ``cluster``: the same exact values plus each user's cluster hash (one field per (user, item
  cluster)) and the item -> cluster table (``docs/cache-format.md``).

In the same run, alternating call by call on the same requests: the client on ``plain``, the
client on ``cluster`` (one pipeline: the bucket HMGETs of the items and one HMGET of their
distinct clusters), and the raw floor for ``cluster`` (redis-py's pipeline of the same
HMGETs, nothing decoded). Reported:
latency percentiles, ``ratio_p50``/``ratio_p99`` (cluster client / plain client),
``floor_ratio_p99`` (cluster client / its floor), coverage by level, bytes per cached value.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import redis

from solaris_lib.cache.format import (
    FALLBACK_CLUSTER,
    STATE_COMPLETE,
    Manifest,
    bucket_key,
    item_clusters_key,
    pack_item_clusters,
    version_id,
)
from solaris_lib.cache.memory import HashLimits
from solaris_lib.cache.publish import PublishConfig
from solaris_lib.cache.server import CacheServer
from solaris_lib.cache.writer import WriteTarget, write_rows
from solaris_lib.client import SolarisClient
from solaris_lib.devtools.redis_server import RedisServer
from solaris_lib.fallback import Level

log = logging.getLogger("bench.lookup_fallback")
ROOT = Path(__file__).resolve().parents[1]


def make_world(options):
    """Catalogue (I,) item ids, their cluster (I,), per-user cached items (U, E) sorted."""
    rng = np.random.default_rng(options.seed)
    catalogue = np.sort(rng.choice(10**8, options.items, replace=False)).astype(np.int64)
    clusters = rng.integers(0, options.clusters, options.items).astype(np.int32)
    cached = np.stack([np.sort(rng.choice(catalogue, options.entries_per_user, replace=False))
                       for _ in range(options.users)])
    return catalogue, clusters, cached


def load(url: str, prefix: str, world, options, with_clusters: bool) -> tuple[str, int]:
    """Write one version with the publisher's writer; returns (version, values written)."""
    catalogue, clusters, cached = world
    users, dim, rng = options.users, options.dim, np.random.default_rng(options.seed + 1)
    buckets = PublishConfig().buckets
    user_ids = np.repeat(np.arange(users, dtype=np.int64), cached.shape[1])
    items = cached.reshape(-1)
    values = rng.standard_normal((len(items), dim)).astype("<f2").view(np.uint8)
    digest = "1" * 32 if with_clusters else "0" * 32
    version = version_id("20260105T100000Z", "bench", dim, buckets, digest)
    stats = write_rows([(user_ids, items, values)],
                       WriteTarget(url, prefix, version, dim, 3600, buckets))
    written = stats["fields_on_server"]
    manifest = Manifest(version, "bench", "fp16", dim, buckets, "", "", int(stats["pairs"]),
                        users, digest, 3600, STATE_COMPLETE)
    with CacheServer(url, prefix) as server:
        if with_clusters:
            cluster_users = np.repeat(np.arange(users, dtype=np.int64), options.clusters)
            cluster_ids = np.tile(np.arange(options.clusters, dtype=np.int64), users)
            cluster_values = rng.standard_normal((len(cluster_ids), dim)).astype("<f2")
            cluster_stats = write_rows([(cluster_users, cluster_ids,
                                         cluster_values.view(np.uint8))],
                                       WriteTarget(url, prefix, version, dim, 3600, 0))
            written += cluster_stats["fields_on_server"]
            chunks = pack_item_clusters(catalogue, clusters)
            for index, chunk in enumerate(chunks):
                server.set(item_clusters_key(prefix, version, index), chunk, 3600)
            manifest = replace(manifest, fallback=FALLBACK_CLUSTER, clusters=options.clusters,
                               cluster_pairs=int(cluster_stats["pairs"]),
                               item_clusters=len(catalogue), item_cluster_chunks=len(chunks))
        server.write_manifest(manifest)
        server.switch_alias(version)
    return version, written


def requests(world, options) -> list:
    """(user, item ids) per call: ``hit_rate`` of the ids cached for the user, the rest other
    catalogue items (which have a cluster)."""
    catalogue, _, cached = world
    rng = np.random.default_rng(options.seed + 2)
    hits = int(round(options.per_call * options.hit_rate))
    out = []
    for _ in range(options.calls + options.warmup):
        u = int(rng.integers(options.users))
        mine = rng.choice(cached[u], hits, replace=False)
        other = rng.choice(np.setdiff1d(catalogue, cached[u], assume_unique=True),
                           options.per_call - hits, replace=False)
        out.append((u, rng.permutation(np.r_[mine, other]).astype(np.int64)))
    return out


def measure(url: str, versions: dict, world, calls: list, options) -> dict:
    raw = redis.Redis.from_url(url, protocol=2)
    clients = {name: SolarisClient.from_url(url, key_prefix=name, timeout_ms=options.timeout_ms,
                                            miss_sample_rate=0.0)
               for name in versions}
    timings: dict[str, list[float]] = {"plain": [], "cluster": [], "floor": []}
    levels = np.zeros(3, dtype=np.int64)

    def timed(name, call):
        started = time.perf_counter_ns()
        result = call()
        timings[name].append((time.perf_counter_ns() - started) / 1000)
        return result

    served = clients["cluster"]._served
    for index, (user, ids) in enumerate(calls):
        # the floor gets its commands for free: the client's HMGETs of this lookup
        commands = served.commands(str(user), ids)[0] + [served.cluster_command(
            str(user), served.clusters.fields(ids)[1])]

        def floor(commands=commands):
            pipe = raw.pipeline(transaction=False)
            for command in commands:
                pipe.hmget(command[1], command[2:])
            return pipe.execute()

        steps = [("plain", lambda u=user, i=ids: clients["plain"].lookup(u, i)),
                 ("cluster", lambda u=user, i=ids: clients["cluster"].lookup(u, i)),
                 ("floor", floor)]
        for name, call in steps[index % 3:] + steps[: index % 3]:
            result = timed(name, call)
            if name == "cluster":
                levels += np.bincount(result.level, minlength=3)
        if index < options.warmup:
            for series in timings.values():
                series.clear()
            levels[:] = 0
    stats = {name: client.stats() for name, client in clients.items()}
    for client in clients.values():
        client.close()
    raw.close()
    return {"timings": timings, "levels": levels,
            "errors": sum(s.errors for s in stats.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--entries-per-user", type=int, default=300)
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--clusters", type=int, default=64)
    parser.add_argument("--per-call", type=int, default=200)
    parser.add_argument("--hit-rate", type=float, default=0.9)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--timeout-ms", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    limits = HashLimits.from_redis_conf((ROOT / "infra" / "redis.conf").read_text())
    world = make_world(options)
    with RedisServer(args=("--maxmemory", "4gb", *limits.server_args())) as server:
        r = redis.Redis.from_url(server.url)
        versions, memory = {}, {}
        for name in ("plain", "cluster"):
            before = r.info("memory")["used_memory"]
            versions[name], values = load(server.url, name, world, options, name == "cluster")
            memory[name] = (r.info("memory")["used_memory"] - before) / values
        encoding = r.object("encoding", bucket_key("cluster", versions["cluster"], 0,
                                                   0)).decode()
        result = measure(server.url, versions, world, requests(world, options), options)
    pct = {name: (float(np.percentile(t, 50)), float(np.percentile(t, 99)))
           for name, t in result["timings"].items()}
    levels = result["levels"] / max(result["levels"].sum(), 1)
    out = {f"{name}_{q}_us": round(pct[name][i], 1) for name in pct
           for i, q in enumerate(("p50", "p99"))}
    out.update({
        "ratio_p50": round(pct["cluster"][0] / pct["plain"][0], 3),
        "ratio_p99": round(pct["cluster"][1] / pct["plain"][1], 3),
        "floor_ratio_p99": round(pct["cluster"][1] / pct["floor"][1], 3),
        "coverage_exact": round(float(levels[Level.EXACT]), 4),
        "coverage_with_fallback": round(float(levels[Level.EXACT] + levels[Level.CLUSTER]), 4),
        "bytes_per_value_plain": round(memory["plain"], 1),
        "bytes_per_value_cluster": round(memory["cluster"], 1),
        "encoding": encoding, "errors": result["errors"],
        "workload": {k: getattr(options, k) for k in (
            "users", "entries_per_user", "items", "clusters", "per_call", "hit_rate", "dim",
            "calls", "warmup")},
    })
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
