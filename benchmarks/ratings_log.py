"""Speculation on a ratings-shaped log: coverage against the popularity baseline (issue 3).

The issue's second target is checked on a real public rating log (one row per rating, about a
thousand users, a 7-day horizon, 200 pairs per user) that is not in the repository and cannot be
downloaded here. This script builds a log of that shape from a small generative model whose
marginals follow the published statistics of such logs (about 950 users, 1,700 items, 100,000
ratings over 7 months; every user rates at least 20 items, most of them in a first burst, some
users come back in later sessions; a long-tailed item popularity with new releases; a low-rank
taste), writes it in the request-log contract (no positions, no clicks, no repeated pairs), and
runs ``solaris speculation-eval`` on it at several cutoffs. It is a sanity check of the shape,
not a substitute for the real data: the generator's parameters are its own, and nothing in
SOLARIS knows about them.

Each horizon holds only 55-300 future rows of known users (most raters are new users), so one
cutoff's coverage moves by 0.005-0.02 per row; the verdict is pooled over the cutoffs: the rows
covered at every cutoff over the known future rows of every cutoff.

Usage: ``.venv/bin/python benchmarks/ratings_log.py [--cutoffs 60,75,...,195] [--budget 200]``.
Last line: one JSON object (per cutoff: coverage, baselines, covered rows; pooled: coverage,
popularity, their ratio, cutoffs won).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition

START = datetime(1997, 9, 20, tzinfo=UTC)
DAYS = 215
RANK = 8


def _items(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, RANK) taste vectors, (n,) log-popularity, (n,) release day (<0: before the log)."""
    vectors = rng.standard_normal((n, RANK)) / np.sqrt(RANK)
    log_pop = rng.normal(0.0, 1.3, n)
    release = np.where(rng.random(n) < 0.12, rng.uniform(0, DAYS, n), -1.0)
    return vectors, log_pop, release


def _sessions(rng: np.random.Generator, join: float, count: int) -> np.ndarray:
    """(count,) rating days of one user: a first burst, then (for a third of users) returns."""
    days = np.full(count, join)
    if rng.random() < 0.35:
        later = rng.random(count) > rng.beta(4, 2)
        returns = join + np.cumsum(rng.exponential(20.0, 8))
        days[later] = rng.choice(returns, later.sum())
    return np.sort(days + rng.uniform(0, 0.05, count))


def _choose(rng, taste, vectors, log_pop, release, day: float, count: int) -> np.ndarray:
    """``count`` distinct items, by popularity x taste x novelty, among those released by
    ``day``."""
    age = day - np.maximum(release, day - 365)
    logit = log_pop + 2.5 * vectors @ taste + 1.5 * np.exp(-age / 30.0) * (release >= 0)
    logit[release > day] = -np.inf
    weights = np.exp(logit - logit[np.isfinite(logit)].max())
    count = min(count, int((weights > 0).sum()))
    return rng.choice(len(weights), count, replace=False, p=weights / weights.sum())


def generate(seed: int = 7, users: int = 950, items: int = 1700) -> pa.Table:
    """One row per rating: (request_id, ts, user_id, item_id), about 100 ratings per user."""
    rng = np.random.default_rng(seed)
    vectors, log_pop, release = _items(rng, items)
    rows: dict[str, list] = {"user_id": [], "item_id": [], "day": []}
    for user in range(users):
        count = 20 + int(rng.lognormal(3.8, 1.0))
        join = rng.uniform(0, DAYS - 1)
        days = _sessions(rng, join, count)
        days = days[days < DAYS]
        chosen = _choose(rng, rng.standard_normal(RANK), vectors, log_pop, release,
                         float(days[-1]), len(days))
        rows["user_id"] += [user] * len(chosen)
        rows["item_id"] += chosen.tolist()
        rows["day"] += days[: len(chosen)].tolist()
    start_us = int(START.timestamp() * 1e6)
    ts = start_us + (np.array(rows["day"]) * 86400e6).astype(np.int64)
    n = len(ts)
    return pa.table({
        "request_id": [f"r{i}" for i in range(n)],
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(rows["user_id"], pa.int64()),
        "item_id": pa.array(rows["item_id"], pa.int64()),
    })


def write_contract(table: pa.Table, root: Path) -> None:
    """Write ``table`` as contract parquet, one file per hour partition (no position, clicked)."""
    hours = table.column("ts").cast(pa.int64()).to_numpy() // 3_600_000_000
    order = np.argsort(hours, kind="stable")
    table, hours = table.take(order), hours[order]
    bounds = np.flatnonzero(np.r_[True, hours[1:] != hours[:-1], True])
    schema = pa.schema([REQUEST_LOG_SCHEMA.field(n) for n in table.column_names])
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        hour = datetime.fromtimestamp(int(hours[start]) * 3600, tz=UTC)
        folder = root / hour_partition(hour)
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(start, end - start).cast(schema), folder / "part-0.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cutoffs", default=",".join(str(d) for d in range(60, 200, 15)),
                        help="days after the log's start")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="solaris-ratings-"))
    try:
        result = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(json.dumps(result) + "\n")


def run(args, work: Path) -> dict:
    from solaris_lib.config import load_settings
    from solaris_lib.sparkutil import get_spark
    from solaris_lib.speculation.evaluate import EvalRequest, evaluate_speculation

    table = generate(args.seed)
    write_contract(table, work / "logs")
    users = len(set(table.column("user_id").to_pylist()))
    print(f"ratings log: {table.num_rows:,} ratings, {users} users", file=sys.stderr)
    spark = get_spark("solaris-bench-ratings", master=load_settings().spark_master)
    cutoffs = []
    for day in (int(d) for d in args.cutoffs.split(",")):
        started = time.perf_counter()
        request = EvalRequest(str(work / "logs"), START + timedelta(days=day), timedelta(days=7),
                              timedelta(days=28), budget_per_user=args.budget)
        report = evaluate_speculation(spark, request)
        popularity = report["baselines"]["popularity"]
        rows = report.get("future_rows_known") or 0
        row = {"cutoff_day": day, "coverage": report["coverage"],
               "coverage_all": report["coverage_all"], "baselines": report["baselines"],
               "future_rows_known": rows,
               "rows_covered": round((report["coverage"] or 0) * rows),
               "rows_covered_popularity": round((popularity or 0) * rows),
               "live_window_days": round(report.get("live_window_s", 0) / 86400, 2),
               "mean_future_pairs_per_user": report["mean_future_pairs_per_user"],
               "ratio_vs_popularity": (round(report["coverage"] / popularity, 3)
                                       if popularity else None),
               "seconds": round(time.perf_counter() - started, 1)}
        print(json.dumps(row), file=sys.stderr)
        cutoffs.append(row)
        spark.catalog.clearCache()  # the stage functions cache their mined tables
    spark.stop()
    return {"ratings": table.num_rows, "users": users, "budget_per_user": args.budget,
            "cutoffs": cutoffs, **pooled(cutoffs)}


def pooled(cutoffs: list[dict]) -> dict:
    """Coverage over every cutoff's known future rows, against the popularity baseline."""
    rows = sum(r["future_rows_known"] for r in cutoffs)
    ours = sum(r["rows_covered"] for r in cutoffs)
    popular = sum(r["rows_covered_popularity"] for r in cutoffs)
    return {"future_rows_known": rows,
            "pooled_coverage": round(ours / rows, 4) if rows else None,
            "pooled_popularity": round(popular / rows, 4) if rows else None,
            "ratio_vs_popularity": round(ours / popular, 3) if popular else None,
            "cutoffs_won": sum(r["rows_covered"] > r["rows_covered_popularity"] for r in cutoffs),
            "cutoffs_lost": sum(r["rows_covered"] < r["rows_covered_popularity"] for r in cutoffs),
            "beats_popularity": bool(popular) and ours > popular}


if __name__ == "__main__":
    main()
