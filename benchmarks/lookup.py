"""Lookup latency: the SOLARIS client against the raw Redis floor, per hash encoding.

One call = one user and 200 items of dimension 64 (fp16), after warm-up, over ``--calls``
calls. In the same run and on the same keys:

* ``client``: ``SolarisClient.lookup`` (one HMGET, decode to float32 (200, 64), hit mask);
* ``floor``: redis-py with hiredis fetching the same bytes in one command (``HMGET``), nothing
  decoded. Both get the item ids as the int64 array a ranker holds (redis-py needs them as a
  list: ``tolist()`` is timed). Client and floor calls alternate so that noise hits both alike;
* ``online_fm``: the foundation model (default size) scoring the same 200 pairs on this CPU
  through its serving path (:func:`online_fm_latencies`).

Each hash encoding gets its own private redis-server: ``hashtable`` (Redis defaults) and
``listpack`` (``infra/redis.conf``). Data is written by the publisher's own writer, so keys and
values are exactly the published format. ``bytes_per_pair`` is the growth of ``used_memory``
per cached pair; server CPU per lookup comes from ``INFO commandstats``.
Last line: one JSON object (top-level figures for the recommended ``infra/redis.conf``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import redis

from solaris_lib.cache.format import STATE_COMPLETE, Manifest, data_key, version_id
from solaris_lib.cache.memory import HashLimits
from solaris_lib.cache.pairs import binary_column
from solaris_lib.cache.server import CacheServer
from solaris_lib.cache.writer import PartitionWriter, WriteTarget
from solaris_lib.client import SolarisClient
from solaris_lib.devtools.redis_server import RedisServer

log = logging.getLogger("bench.lookup")
ROOT = Path(__file__).resolve().parents[1]
PREFIX = "bench"
TARGETS = {"ratio_p99": 1.25, "client_p50_us": 500.0, "bytes_per_payload": 1.5,
           "speedup_vs_online_fm": 50.0}


def recommended_limits() -> HashLimits:
    """The hash settings of the shipped ``infra/redis.conf``."""
    path = ROOT / "infra" / "redis.conf"
    return HashLimits.from_redis_conf(path.read_text(), str(path))


def make_pairs(users: int, entries: int, dim: int, seed: int):
    """Sorted (user, item) pairs and fp16 values: ``entries`` distinct items per user."""
    rng = np.random.default_rng(seed)
    user_ids = np.repeat(np.arange(users, dtype=np.int64), entries)
    items = np.concatenate([np.sort(rng.choice(10**8, entries, replace=False))
                            for _ in range(users)]).astype(np.int64)
    values = rng.standard_normal((len(user_ids), dim)).astype("<f2")
    return user_ids, items, values


def load(url: str, user_ids, items, values, dim: int) -> str:
    """Write the pairs with the publisher's writer, then the manifest and the alias."""
    version = version_id("20260105T100000Z", "bench", "fp16", dim, "0" * 32)
    writer = PartitionWriter(WriteTarget(url, PREFIX, version, "fp16", dim, 3600))
    batch = pa.RecordBatch.from_arrays([pa.array(user_ids), pa.array(items),
                                        binary_column(values)],
                                       names=["user_id", "item_id", "embedding"])
    writer.add(batch)
    stats = writer.finish().to_pylist()[0]
    writer.router.close()
    assert stats["fields_on_server"] == len(items), stats
    with CacheServer(url, PREFIX) as server:
        server.write_manifest(Manifest(version, "bench", "fp16", dim, "", "", len(items),
                                       int(user_ids.max()) + 1, "0" * 32, 3600, STATE_COMPLETE))
        server.switch_alias(version)
    return version


def requests(user_ids, items, calls: int, per_call: int, hit_rate: float, seed: int):
    """(user, item ids) per call: ``hit_rate`` of the ids cached for the user, the rest not."""
    rng = np.random.default_rng(seed)
    users = np.unique(user_ids)
    starts = np.searchsorted(user_ids, users)
    ends = np.searchsorted(user_ids, users, side="right")
    hits = int(round(per_call * hit_rate))
    out = []
    for _ in range(calls):
        u = int(rng.integers(len(users)))
        cached = rng.choice(items[starts[u]:ends[u]], hits, replace=False)
        absent = rng.integers(10**9, 2 * 10**9, per_call - hits)  # never cached
        out.append((int(users[u]), rng.permutation(np.concatenate([cached, absent]))))
    return out


def measure(url: str, version: str, calls: list, warmup: int, timeout_ms: float) -> dict:
    """Alternate client and floor calls; latencies in microseconds."""
    raw = redis.Redis.from_url(url)
    client = SolarisClient.from_url(url, key_prefix=PREFIX, timeout_ms=timeout_ms,
                                    miss_sample_rate=0.01)
    timings: dict[str, list[float]] = {"client": [], "floor": []}

    def client_call(user, ids):
        started = time.perf_counter_ns()
        client.lookup(user, ids)
        return (time.perf_counter_ns() - started) / 1000

    def floor_call(user, ids):
        started = time.perf_counter_ns()
        raw.hmget(data_key(PREFIX, version, user), ids.tolist())
        return (time.perf_counter_ns() - started) / 1000

    raw.config_resetstat()
    for index, (user, ids) in enumerate(calls):
        pair = [("client", client_call), ("floor", floor_call)]
        for name, call in (pair if index % 2 == 0 else pair[::-1]):
            elapsed = call(user, ids)
            if index >= warmup:
                timings[name].append(elapsed)
    hmget = raw.info("commandstats").get("cmdstat_hmget", {})
    stats = client.stats()
    client.close()
    raw.close()
    return {"timings": timings, "server_us_per_hmget": hmget.get("usec_per_call"),
            "client_errors": stats.errors, "client_hit_rate": round(stats.hit_rate, 4)}


def online_fm_latencies(user_id: int, item_ids: np.ndarray, calls: int) -> list[float]:
    """Microseconds per call of the foundation model scoring ``item_ids`` for ``user_id``.

    The peer "run the FM online for the same 200 pairs on this CPU": the model at its default
    size (random weights: the cost does not depend on their values), eval mode, inference mode,
    a full ``max_history`` history encoded once and the 200 targets in one batch per call
    (:meth:`FoundationEmbedder.score_user`, the serving path), warm-up excluded. At most 200
    timed calls: the FM is slow enough that its median is stable long before that.
    """
    import torch

    from solaris_lib.model.config import FoundationConfig
    from solaris_lib.model.network import FoundationNet
    from solaris_lib.model.online import FoundationEmbedder, History

    torch.manual_seed(0)
    cfg = FoundationConfig.preset("default", dropout=0.0)
    embedder = FoundationEmbedder(FoundationNet(cfg), version="bench", device="cpu")
    rng = np.random.default_rng(user_id)
    n = cfg.max_history
    asof = 1_767_600_000_000_000  # epoch us; the history is the 7 days before it
    history = History(item_ids=rng.integers(0, 10**8, n).astype(np.int64),
                      ts_us=np.sort(asof - rng.integers(1, 7 * 86_400 * 10**6, n)).astype(np.int64),
                      clicked=rng.integers(0, 2, n).astype(np.int8))
    for _ in range(3):
        embedder.score_user(history, item_ids, asof)
    micros = []
    for _ in range(min(calls, 200)):
        started = time.perf_counter()
        embedder.score_user(history, item_ids, asof)
        micros.append((time.perf_counter() - started) * 1e6)
    return micros


def summarize(result: dict, payload: int, bytes_per_pair: float) -> dict:
    client = np.asarray(result["timings"]["client"])
    floor = np.asarray(result["timings"]["floor"])
    figures = {
        "client_p50_us": round(float(np.percentile(client, 50)), 1),
        "client_p99_us": round(float(np.percentile(client, 99)), 1),
        "floor_p50_us": round(float(np.percentile(floor, 50)), 1),
        "floor_p99_us": round(float(np.percentile(floor, 99)), 1),
        "bytes_per_pair": round(bytes_per_pair, 1),
    }
    figures["ratio_p50"] = round(figures["client_p50_us"] / figures["floor_p50_us"], 3)
    figures["ratio_p99"] = round(figures["client_p99_us"] / figures["floor_p99_us"], 3)
    figures["bytes_per_payload"] = round(bytes_per_pair / payload, 3)
    figures.update({k: result[k] for k in ("server_us_per_hmget", "client_errors",
                                           "client_hit_rate")})
    return figures


def run_encoding(name: str, args: list[str], pairs, options) -> dict:
    user_ids, items, values = pairs
    with RedisServer(args=("--maxmemory", "4gb", *args)) as server:
        r = redis.Redis.from_url(server.url)
        before = r.info("memory")["used_memory"]
        version = load(server.url, user_ids, items, values, options.dim)
        used = r.info("memory")["used_memory"] - before
        encoding = r.object("encoding", data_key(PREFIX, version, 0)).decode()
        calls = requests(user_ids, items, options.calls + options.warmup, options.per_call,
                         options.hit_rate, options.seed + 1)
        result = measure(server.url, version, calls, options.warmup, options.timeout_ms)
    figures = summarize(result, 2 * options.dim, used / len(items))
    log.info("%s (%s): %s", name, encoding, figures)
    return {"encoding": encoding, "server_args": args, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--entries-per-user", type=int, default=300)
    parser.add_argument("--per-call", type=int, default=200)
    parser.add_argument("--hit-rate", type=float, default=0.9)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--timeout-ms", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    pairs = make_pairs(options.users, options.entries_per_user, options.dim, options.seed)
    configs = {"hashtable": run_encoding("hashtable", [], pairs, options),
               "listpack": run_encoding("listpack", recommended_limits().server_args(), pairs,
                                        options)}
    user, ids = requests(*pairs[:2], 1, options.per_call, options.hit_rate, options.seed)[0]
    fm = online_fm_latencies(user, ids, options.calls)
    chosen = configs["listpack"]
    out = {k: chosen[k] for k in ("client_p50_us", "client_p99_us", "floor_p50_us",
                                  "floor_p99_us", "ratio_p99", "bytes_per_pair")}
    out["online_fm_p50_us"] = round(float(np.percentile(fm, 50)), 1) if fm else None
    out["speedup_vs_online_fm"] = (round(out["online_fm_p50_us"] / out["client_p50_us"], 1)
                                   if fm else None)
    out["recommended_config"] = "infra/redis.conf (listpack)"
    out["payload_bytes"] = 2 * options.dim
    out["targets_met"] = _targets(configs)
    out["configs"] = configs
    out["workload"] = {k: getattr(options, k) for k in ("users", "entries_per_user", "per_call",
                                                         "hit_rate", "dim", "calls", "warmup")}
    sys.stdout.write(json.dumps(out) + "\n")


def _targets(configs: dict) -> dict:
    return {name: {"ratio_p99": c["ratio_p99"] <= TARGETS["ratio_p99"],
                   "client_p50_us": c["client_p50_us"] <= TARGETS["client_p50_us"],
                   "bytes_per_payload": c["bytes_per_payload"] <= TARGETS["bytes_per_payload"]}
            for name, c in configs.items()}


if __name__ == "__main__":
    main()
