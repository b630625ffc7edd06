"""Lookup latency and memory: the SOLARIS client against the raw Redis floor, per layout.

One call = one user and 200 items of dimension 64 (fp16), after warm-up, over ``--calls``
calls. In the same run and on the same keys, calls alternating so that noise hits all alike:

* ``client``: ``SolarisClient.lookup`` (one redis-py pipeline of the user's bucket HMGETs,
  decode to float32 (200, 64), hit mask);
* ``floor``: redis-py's ``Pipeline`` (hiredis) fetching the same bytes with the same HMGETs in
  one round trip, nothing decoded: the raw Redis floor;
* ``lean``: the client's own exchange without the decode: the same commands packed by hiredis
  and sent on a pooled redis-py connection (``solaris_lib.cache.connection.send``, what
  ``SolarisClient`` sends). A hand-written path beside redis-py's ``Pipeline`` is kept only
  while ``lean_gain_p50`` = 1 - lean / floor at p50 is at least 0.15
  (``hand_written_lookup_path_justified``);
* ``online_fm``: the foundation model at the size training builds (``SOLARIS_FOUNDATION_PRESET``,
  the model the cache holds; ``--fm-preset`` for another) scoring the same 200 pairs on this CPU
  through its serving path (:func:`online_fm_latencies`).

Each layout gets its own private redis-server: ``infra/redis.conf`` (listpack hashes) with the
publisher's default bucket count and with one bucket, and Redis defaults (hashtable) with one
bucket. Data is written by the publisher's own writer, so keys and values are exactly the
published format. ``bytes_per_pair`` is the growth of ``used_memory`` per cached pair; server
CPU per HMGET comes from ``INFO commandstats``. Last line: one JSON object (top-level figures:
``infra/redis.conf`` with the default bucket count).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import redis

from solaris_lib.cache.connection import Nodes, send
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.format import STATE_COMPLETE, Manifest, bucket_key, version_id
from solaris_lib.cache.memory import HashLimits
from solaris_lib.cache.publish import PublishConfig
from solaris_lib.cache.server import CacheServer
from solaris_lib.cache.writer import WriteTarget, write_rows
from solaris_lib.client import SolarisClient
from solaris_lib.config import load_settings
from solaris_lib.devtools.redis_server import RedisServer
from solaris_lib.model.config import PRESETS

log = logging.getLogger("bench.lookup")
ROOT = Path(__file__).resolve().parents[1]
PREFIX = "bench"
TARGETS = {"ratio_p99": 1.1, "client_p50_us": 400.0, "bytes_per_pair": 192.0,
           "speedup_vs_online_fm": 50.0}
LEAN_GAIN_NEEDED = 0.15  # what a hand-written lookup path must save over redis-py at p50


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


def load(url: str, pairs, dim: int, buckets: int) -> str:
    """Write the pairs with the publisher's writer, then the manifest and the alias."""
    user_ids, items, values = pairs
    version = version_id("20260105T100000Z", "bench", dim, buckets, "0" * 32)
    stats = write_rows([(user_ids, items, values.view(np.uint8))],
                       WriteTarget(url, PREFIX, version, dim, 3600, buckets))
    assert stats["fields_on_server"] == len(items), stats
    with CacheServer(url, PREFIX) as server:
        server.write_manifest(Manifest(version, "bench", "fp16", dim, buckets, "", "",
                                       len(items), int(user_ids.max()) + 1, "0" * 32, 3600,
                                       STATE_COMPLETE))
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
    """Alternate client, floor and lean calls; latencies in microseconds."""
    raw = redis.Redis.from_url(url, protocol=2)
    nodes = Nodes(Endpoint.from_url(url), timeout_ms / 1000.0)
    pool = nodes.pool(nodes.masters()[0])
    client = SolarisClient.from_url(url, key_prefix=PREFIX, timeout_ms=timeout_ms,
                                    miss_sample_rate=0.01)
    served = client._served
    timings: dict[str, list[float]] = {"client": [], "floor": [], "lean": []}

    def client_call(user, ids):
        started = time.perf_counter_ns()
        client.lookup(user, ids)
        return (time.perf_counter_ns() - started) / 1000

    def floor_call(user, ids):
        started = time.perf_counter_ns()
        pipe = raw.pipeline(transaction=False)
        for command in served.commands(str(user), ids)[0]:
            pipe.hmget(command[1], command[2:])
        pipe.execute()
        return (time.perf_counter_ns() - started) / 1000

    def lean_call(user, ids):
        started = time.perf_counter_ns()
        send(pool, served.commands(str(user), ids)[0])
        return (time.perf_counter_ns() - started) / 1000

    raw.config_resetstat()
    order = [("client", client_call), ("floor", floor_call), ("lean", lean_call)]
    for index, (user, ids) in enumerate(calls):
        turn = order[index % 3:] + order[:index % 3]
        for name, call in turn:
            elapsed = call(user, ids)
            if index >= warmup:
                timings[name].append(elapsed)
    hmget = raw.info("commandstats").get("cmdstat_hmget", {})
    stats = client.stats()
    client.close()
    raw.close()
    nodes.close()
    return {"timings": timings, "server_us_per_hmget": hmget.get("usec_per_call"),
            "hmgets_per_call": round(hmget.get("calls", 0) / (3 * len(calls)), 2),
            "client_errors": stats.errors, "client_hit_rate": round(stats.hit_rate, 4)}


def online_fm_latencies(user_id: int, item_ids: np.ndarray, calls: int,
                        model: str, preset: str) -> list[float]:
    """Microseconds per call of the foundation model scoring ``item_ids`` for ``user_id``.

    The peer "run the FM online for the same 200 pairs on this CPU": the model at the size
    ``preset`` names (random weights: the cost does not depend on their values), eval mode,
    inference mode,
    a full ``max_history`` history encoded once and the 200 targets in one batch per call
    (:meth:`FoundationEmbedder.score_user`, the serving path), warm-up excluded. At most 200
    timed calls: the FM is slow enough that its median is stable long before that.
    ``model``: which shipped model (``foundation`` or ``two_tower``), run through the contract.
    """
    import torch

    from solaris_lib.model.online import FoundationEmbedder, History

    torch.manual_seed(0)
    if model == "two_tower":
        from solaris_lib.model.two_tower import TwoTowerConfig, TwoTowerNet

        net = TwoTowerNet(TwoTowerConfig.preset(preset, dropout=0.0))
    else:
        from solaris_lib.model.config import FoundationConfig
        from solaris_lib.model.network import FoundationNet

        net = FoundationNet(FoundationConfig.preset(preset, dropout=0.0))
    embedder = FoundationEmbedder(net, version="bench", device="cpu")
    rng = np.random.default_rng(user_id)
    n = embedder.max_history
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
    p50 = {name: float(np.percentile(t, 50)) for name, t in result["timings"].items()}
    p99 = {name: float(np.percentile(t, 99)) for name, t in result["timings"].items()}
    figures = {f"{name}_p{q}_us": round(table[name], 1) for name in p50
               for q, table in ((50, p50), (99, p99))}
    figures.update({
        "bytes_per_pair": round(bytes_per_pair, 1),
        "bytes_per_payload": round(bytes_per_pair / payload, 3),
        "ratio_p50": round(p50["client"] / p50["floor"], 3),
        "ratio_p99": round(p99["client"] / p99["floor"], 3),
        "lean_gain_p50": round(1 - p50["lean"] / p50["floor"], 3),
    })
    figures.update({k: result[k] for k in ("server_us_per_hmget", "hmgets_per_call",
                                           "client_errors", "client_hit_rate")})
    return figures


def run_layout(name: str, args: list[str], buckets: int, pairs, options) -> dict:
    user_ids, items, _ = pairs
    with RedisServer(args=("--maxmemory", "4gb", *args)) as server:
        r = redis.Redis.from_url(server.url)
        before = r.info("memory")["used_memory"]
        version = load(server.url, pairs, options.dim, buckets)
        used = r.info("memory")["used_memory"] - before
        encoding = r.object("encoding", bucket_key(PREFIX, version, 0, 0)).decode()
        calls = requests(user_ids, items, options.calls + options.warmup, options.per_call,
                         options.hit_rate, options.seed + 1)
        result = measure(server.url, version, calls, options.warmup, options.timeout_ms)
    figures = summarize(result, 2 * options.dim, used / len(items))
    log.info("%s (%s, %d buckets): %s", name, encoding, buckets, figures)
    return {"encoding": encoding, "buckets": buckets, "server_args": args, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--entries-per-user", type=int, default=300)
    parser.add_argument("--per-call", type=int, default=200)
    parser.add_argument("--hit-rate", type=float, default=0.9)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--buckets", type=int, default=PublishConfig().buckets)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--timeout-ms", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-fm", action="store_true", help="skip the online FM peer")
    parser.add_argument("--fm-model", choices=("foundation", "two_tower"), default="foundation",
                        help="the shipped model of the online peer (default: foundation)")
    parser.add_argument("--fm-preset", choices=sorted(PRESETS),
                        default=load_settings().foundation_preset,
                        help="the online peer's size preset (default: the one training builds, "
                        "SOLARIS_FOUNDATION_PRESET)")
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    pairs = make_pairs(options.users, options.entries_per_user, options.dim, options.seed)
    shipped = recommended_limits().server_args()
    layouts = {"shipped": run_layout("shipped", shipped, options.buckets, pairs, options),
               "shipped_one_bucket": run_layout("shipped, one bucket", shipped, 1, pairs,
                                                options),
               "hashtable_one_bucket": run_layout("Redis defaults, one bucket", [], 1, pairs,
                                                  options)}
    chosen = layouts["shipped"]
    out = {k: chosen[k] for k in ("client_p50_us", "client_p99_us", "floor_p50_us",
                                  "floor_p99_us", "lean_p50_us", "ratio_p99",
                                  "bytes_per_pair", "lean_gain_p50", "buckets")}
    if not options.no_fm:
        user, ids = requests(*pairs[:2], 1, options.per_call, options.hit_rate, options.seed)[0]
        fm = online_fm_latencies(user, ids, options.calls, options.fm_model, options.fm_preset)
        out["online_fm_model"] = options.fm_model
        out["online_fm_preset"] = options.fm_preset
        out["online_fm_p50_us"] = round(float(np.percentile(fm, 50)), 1)
        out["speedup_vs_online_fm"] = round(out["online_fm_p50_us"] / out["client_p50_us"], 1)
    out["recommended_config"] = "infra/redis.conf (listpack) with the publisher's buckets"
    out["payload_bytes"] = 2 * options.dim
    out["targets"] = TARGETS
    out["targets_met"] = {name: _met(name, out[name]) for name in TARGETS if name in out}
    out["hand_written_lookup_path_justified"] = chosen["lean_gain_p50"] >= LEAN_GAIN_NEEDED
    out["layouts"] = layouts
    out["workload"] = {k: getattr(options, k) for k in ("users", "entries_per_user", "per_call",
                                                         "hit_rate", "dim", "calls", "warmup")}
    sys.stdout.write(json.dumps(out) + "\n")


def _met(name: str, value: float) -> bool:
    if name == "speedup_vs_online_fm":
        return value >= TARGETS[name]
    return value <= TARGETS[name]


if __name__ == "__main__":
    main()
