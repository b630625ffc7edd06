"""Sustained lookups from several processes while a new cache version is published.

Used by ``benchmarks/load.py`` (60 s, 4 processes) and by a short integration test. The run:

1. writes two embeddings partitions (intervals t and t+1) with the same (user, item) pairs but
   version-specific values: the first component of every embedding is the version's marker
   (1.0 or 2.0, exact in fp16), the rest random;
2. publishes t with the real publisher (:func:`solaris_lib.cache.publish.publish`, Spark);
3. starts ``processes`` worker processes (spawned), each with its own
   :class:`~solaris_lib.client.SolarisClient`, calling ``lookup(user, 200 items)`` on a fixed
   schedule of ``rate`` calls per second (a late call is sent at once, never skipped);
4. publishes t+1 at ``publish_at`` of the run, while the workers read;
5. gathers every call: latency (us), error, rows missed, and whether its rows came from more
   than one version (``mixed``: markers differ, or differ from the version the result names).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from solaris_lib.intervals import Interval

log = logging.getLogger(__name__)
PREFIX = "load"
FIRST = Interval(datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))
MARKERS = {"load-v1": 1.0, "load-v2": 2.0}
_ITEM_BASE = 1_000_000
RECORD_FIELDS = {"t": np.float32, "us": np.float32, "version": np.int8, "error": bool,
                 "timeout": bool, "exception": bool, "missed": np.int32, "mixed": bool}
PHASES = ("before", "during", "after")  # the publish of the second version


@dataclass(frozen=True)
class LoadConfig:
    """One load run. ``rate`` is lookups per second per process; ``publish_at`` the share of
    ``seconds`` after which the second version's publish starts. Readers stop after
    ``seconds``, or ``after_publish_s`` after the publish ended when that is later."""

    processes: int = 4
    seconds: float = 60.0
    rate: float = 250.0
    users: int = 500
    items: int = 200
    dim: int = 64
    publish_at: float = 0.4
    after_publish_s: float = 5.0
    timeout_ms: float = 20.0
    refresh_interval_s: float = 0.5
    seed: int = 0


def user_items(user: int, items: int) -> np.ndarray:
    """(items,) int64: the item ids cached for ``user`` (the same in both versions)."""
    return _ITEM_BASE + user * items + np.arange(items, dtype=np.int64)


def embeddings_table(config: LoadConfig, model_version: str):
    """Every (user, item) pair of the run with fp16 embeddings whose first value is the
    version's marker: the contract columns of ``embeddings/interval=KEY/``."""
    import pyarrow as pa

    from solaris_lib.cache.pairs import binary_column

    rng = np.random.default_rng([config.seed, int(MARKERS[model_version])])
    users = np.repeat(np.arange(config.users, dtype=np.int64), config.items)
    items = np.concatenate([user_items(u, config.items) for u in range(config.users)])
    values = rng.standard_normal((len(users), config.dim)).astype("<f2")
    values[:, 0] = MARKERS[model_version]
    return pa.table({"user_id": users, "item_id": items,
                     "model_version": pa.array([model_version] * len(users), pa.string()),
                     "embedding": binary_column(values)})


def write_partition(settings, interval: Interval, table) -> None:
    """Write ``table`` as the complete embeddings partition of ``interval``."""
    import pyarrow.parquet as pq

    from solaris_lib.layout import EMBEDDINGS, DataLayout
    from solaris_lib.storage import atomic_folder

    with atomic_folder(DataLayout.from_settings(settings).output(EMBEDDINGS, interval)) as out:
        pq.write_table(table, f"{out}/part-00000.parquet")


# -- worker processes -------------------------------------------------------------------------

def _worker(url: str, config: LoadConfig, index: int, start, go, stop, results) -> None:
    """One process: lookups on a fixed schedule from ``start.value`` until ``stop`` is set."""
    from solaris_lib.client import SolarisClient

    rng = np.random.default_rng([config.seed, index])
    record: dict[str, list] = {name: [] for name in RECORD_FIELDS}
    with SolarisClient.from_url(url, key_prefix=PREFIX, timeout_ms=config.timeout_ms,
                                dim=config.dim, miss_sample_rate=0.0,
                                refresh_interval_s=config.refresh_interval_s) as client:
        results.put(("ready", index))
        go.wait()
        began, k = start.value, 0
        while not stop.is_set():
            pause = began + k / config.rate - time.time()
            if pause > 0:
                time.sleep(pause)
            user = int(rng.integers(config.users))
            sent = time.perf_counter()
            try:
                result = client.lookup(user, user_items(user, config.items))
            except Exception:  # noqa: BLE001 - the contract says none: counted, never hidden
                result = None
            record["us"].append((time.perf_counter() - sent) * 1e6)
            record["t"].append(time.time() - began)
            _check(result, record)
            k += 1
        stats = client.stats()
    arrays = {name: np.asarray(values, RECORD_FIELDS[name]) for name, values in record.items()}
    results.put(("done", index, arrays, {"timeouts": stats.timeouts,
                                         "connection_errors": stats.connection_errors,
                                         "server_errors": stats.server_errors,
                                         "short_circuited": stats.short_circuited,
                                         "breaker_opens": stats.breaker_opens,
                                         "version_switches": stats.version_switches}))


def _check(result, record: dict) -> None:
    """Append the error, timeout and exception flags, rows missed, version and mixing of one
    lookup (``result`` None: the lookup raised)."""
    record["exception"].append(result is None)
    record["timeout"].append(result is not None and result.error == "timeout")
    if result is None:
        for name, value in (("error", True), ("missed", 0), ("version", 0), ("mixed", False)):
            record[name].append(value)
        return
    hit = result.hit
    markers = result.embeddings[hit, 0]
    expected = MARKERS.get(result.model_version, np.nan)
    failed = result.error is not None
    record["error"].append(failed)
    record["missed"].append(0 if failed else int((~hit).sum()))
    record["version"].append(0 if failed else int(MARKERS.get(result.model_version, -1)))
    record["mixed"].append(bool(len(markers)) and bool((markers != expected).any()))


# -- the driver -------------------------------------------------------------------------------

def run_load(spark, config: LoadConfig, url: str | None = None) -> dict:
    """Run the load against ``url`` (a private redis-server when None); the figures as a dict.

    ``url`` must be a server this run may fill under the key prefix ``load``.
    """
    from solaris_lib.devtools.redis_server import RedisServer

    if url is not None:
        return _run(spark, config, url)
    with RedisServer(args=("--maxmemory", "1gb")) as server:
        return _run(spark, config, server.url)


def _run(spark, config: LoadConfig, url: str) -> dict:
    from solaris_lib.cache.publish import PublishConfig, publish
    from solaris_lib.config import load_settings

    second = FIRST.shift(timedelta(hours=1))
    with tempfile.TemporaryDirectory(prefix="solaris-load-") as folder:
        settings = load_settings(data_root=str(Path(folder) / "data"), redis_url=url,
                                 redis_key_prefix=PREFIX)
        write_partition(settings, FIRST, embeddings_table(config, "load-v1"))
        write_partition(settings, second, embeddings_table(config, "load-v2"))
        first_report = publish(spark, settings, FIRST, PublishConfig())
        log.info("version %s published (%d pairs); starting %d readers",
                 first_report.version, first_report.pairs, config.processes)
        load_at_start = os.getloadavg()[0]
        context = multiprocessing.get_context("spawn")
        start, go, stop = context.Value("d", 0.0), context.Event(), context.Event()
        results = context.Queue()
        workers = [context.Process(target=_worker,
                                   args=(url, config, i, start, go, stop, results))
                   for i in range(config.processes)]
        for worker in workers:
            worker.start()
        try:
            for _ in workers:
                _expect(results.get(timeout=120), "ready")
            start.value = time.time() + 0.5
            go.set()
            publish_window = _publish_mid_run(spark, settings, second, config, start.value,
                                              PublishConfig())
            end = max(start.value + config.seconds,
                      start.value + publish_window["end_s"] + config.after_publish_s)
            time.sleep(max(0.0, end - time.time()))
            stop.set()
            done = [_expect(results.get(timeout=120), "done")
                    for _ in workers]
        finally:
            stop.set()
            go.set()
            for worker in workers:
                worker.join(timeout=30)
                if worker.is_alive():
                    worker.kill()
    figures = summarize(config, done, publish_window, first_report.version)
    figures["loadavg_1m_at_start"] = round(load_at_start, 2)
    figures["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    figures["cpus"] = os.cpu_count()
    return figures


def _expect(message: tuple, kind: str) -> tuple:
    if message[0] != kind:
        raise RuntimeError(f"load worker sent {message[0]!r}, expected {kind!r}")
    return message


def _publish_mid_run(spark, settings, interval: Interval, config: LoadConfig, began: float,
                     publish_config) -> dict:
    """Sleep until ``publish_at`` of the run, publish ``interval``; offsets (s) and version."""
    from solaris_lib.cache.publish import publish

    time.sleep(max(0.0, began + config.publish_at * config.seconds - time.time()))
    started = time.time() - began
    report = publish(spark, settings, interval, publish_config)
    ended = time.time() - began
    log.info("version %s published at %.1f-%.1f s of the run", report.version, started, ended)
    return {"start_s": started, "end_s": ended, "version": report.version,
            "status": report.status}


def summarize(config: LoadConfig, done: list[tuple], window: dict, first: str) -> dict:
    """The run's figures from every worker's records (latencies in us)."""
    records = [message[2] for message in done]
    merged = {name: np.concatenate([r[name] for r in records]) for name in records[0]}
    counters = {name: sum(message[3][name] for message in done) for name in done[0][3]}
    us, t = merged["us"].astype(np.float64), merged["t"]
    before = t < window["start_s"]
    during = (t >= window["start_s"]) & (t < window["end_s"])
    after = t >= window["end_s"]
    masks = dict(zip(PHASES, (before, during, after), strict=True))
    lookups = len(us)
    elapsed = float(t.max()) if lookups else 0.0
    p99 = {name: _percentile(us[mask], 99) for name, mask in
           (("before", before), ("during", during), ("after", after))}
    return {
        "benchmark": "load", **asdict(config),
        "lookups": lookups, "run_s": round(elapsed, 2),
        "target_per_s": config.processes * config.rate,
        "throughput_per_s": round(lookups / max(elapsed, 1e-9), 1),
        "p50_us": _percentile(us, 50), "p99_us": _percentile(us, 99),
        "p999_us": _percentile(us, 99.9), "max_us": round(float(us.max()), 1) if lookups else None,
        "p99_before_publish_us": p99["before"], "p99_during_publish_us": p99["during"],
        "p99_after_publish_us": p99["after"],
        "ratio_p99_during_vs_before": (round(p99["during"] / p99["before"], 2)
                                       if p99["during"] and p99["before"] else None),
        "errors_before_publish": int(merged["error"][before].sum()),
        "errors_during_publish": int(merged["error"][during].sum()),
        "errors_after_publish": int(merged["error"][after].sum()),
        "errors": int(merged["error"].sum()), **counters,  # errors: lookups answered with
        # misses because of a timeout, a connection or server error, or an open breaker
        "lookups_with_misses": int((merged["missed"] > 0).sum()),
        "mixed_versions": int(merged["mixed"].sum()),
        "lookups_v1": int((merged["version"] == 1).sum()),
        "lookups_v2": int((merged["version"] == 2).sum()),
        "first_version": first, "second_version": window["version"],
        "publish_status": window["status"],
        "publish_start_s": round(window["start_s"], 2), "publish_end_s": round(window["end_s"], 2),
        "first_v2_lookup_after_publish_s": _first_after(t, merged["version"], window["end_s"]),
        "exceptions": int(merged["exception"].sum()),
        "timeouts_total": int(merged["timeout"].sum()),
        "timeout_rate": round(float(merged["timeout"].mean()), 6) if lookups else None,
        "phases": {name: _phase(merged, us, mask) for name, mask in masks.items()},
    }


def _phase(merged: dict, us: np.ndarray, mask: np.ndarray) -> dict:
    """One phase's figures: lookups, timeouts (and their share), errors, exceptions, mixed
    versions, p50/p99 (us)."""
    n = int(mask.sum())
    return {"lookups": n, "timeouts": int(merged["timeout"][mask].sum()),
            "timeout_rate": round(float(merged["timeout"][mask].mean()), 6) if n else None,
            "errors": int(merged["error"][mask].sum()),
            "exceptions": int(merged["exception"][mask].sum()),
            "mixed_versions": int(merged["mixed"][mask].sum()),
            "p50_us": _percentile(us[mask], 50), "p99_us": _percentile(us[mask], 99)}


def _percentile(values: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if len(values) else None


def _first_after(t: np.ndarray, versions: np.ndarray, switched_at: float) -> float | None:
    """Seconds from ``publish()`` returning (just after the alias switch) to the first lookup
    served by the new version; negative when a reader switched before it returned."""
    new = t[versions == 2]
    return round(float(new.min()) - switched_at, 3) if len(new) else None
