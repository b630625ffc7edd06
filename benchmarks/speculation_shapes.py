"""Speculation on logs of several shapes: coverage against the best single-source baseline.

For each shape of :mod:`solaris_lib.simulate.shapes` (impression logs with repeats, a sparse
ratings log, bursty short sessions, a long-lived catalogue) the script writes the logs, runs
``solaris speculation-eval`` at the shape's cutoffs in one Spark session and pools the rows
covered over the cutoffs. The baselines are the single-source rankings of the same run
(``baselines`` in the report: each source's own ranking of its candidates, at the same budget);
``worst_margin`` is the smallest ``coverage - best_baseline`` over the shapes, which the issue
asks to be >= 0. Beside them, ``textbook_popularity``: the most rated items new to each known
user over the last 7 / 28 days of the history, at the same per-user budget, computed here in
numpy from the logs alone (a check of the popular source that shares no code with it).

Usage: ``.venv/bin/python benchmarks/speculation_shapes.py [--shapes a,b] [--size bench|test]
[--seed 7] [--scorer auto|RANKING]`` (``--scorer``: keep that ranking without validating, as
``speculation-eval --scorer`` does). Progress lines on stderr; last line one JSON object:
``{"shapes": {name: {"coverage", "best_baseline", "selected", ...}}, "worst_margin"}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

from solaris_lib.simulate.shapes import SHAPES, shape

TEXTBOOK_WINDOWS_DAYS = (7, 28)


def textbook_popularity(logs: Path, cutoff, lookback: timedelta, horizon: timedelta,
                        per_user: int) -> dict:
    """{window days: (rows covered, known rows)}: each user known in the lookback gets the
    ``per_user`` items with the most rows in the window before the cutoff that they have no
    row for in the lookback; rows of those users in the horizon on those pairs."""
    table = ds.dataset(logs, format="parquet", partitioning="hive",
                       ignore_prefixes=["_", "."]).to_table(columns=["ts", "user_id", "item_id"])
    ts = table.column("ts").cast("int64").to_numpy()
    user, item = table.column("user_id").to_numpy(), table.column("item_id").to_numpy()
    at = int(cutoff.timestamp() * 1e6)
    history = (ts >= at - int(lookback.total_seconds() * 1e6)) & (ts < at)
    ahead = (ts >= at) & (ts < at + int(horizon.total_seconds() * 1e6))
    known = np.isin(user, np.unique(user[history]))
    seen = {}
    for u, i in zip(user[history].tolist(), item[history].tolist(), strict=True):
        seen.setdefault(u, set()).add(i)
    future = {}
    for u, i in zip(user[ahead & known].tolist(), item[ahead & known].tolist(), strict=True):
        future[(u, i)] = future.get((u, i), 0) + 1
    out = {}
    for days in TEXTBOOK_WINDOWS_DAYS:
        window = history & (ts >= at - days * 86_400_000_000)
        ids, counts = np.unique(item[window], return_counts=True)
        ranked = ids[np.lexsort((ids, -counts))].tolist()
        hit = 0
        for u, own in seen.items():
            picked = [i for i in ranked if i not in own][:per_user]
            hit += sum(future.get((u, i), 0) for i in picked)
        out[days] = (hit, sum(future.values()))
    return out


def run_shape(spark, name: str, size: str, seed: int, work: Path, scorer: str = "auto") -> dict:
    """Write the shape's logs, evaluate at each cutoff, pool the rows covered."""
    from solaris_lib.speculation.evaluate import EvalRequest, evaluate_speculation

    spec = shape(name, size, seed)
    started = time.perf_counter()
    logs = work / name
    rows = spec.write(str(logs))
    print(f"{name}: {rows:,} rows written", file=sys.stderr)
    known, ours, baselines, selected, textbook, shapes = 0, 0.0, {}, [], {}, []
    for cutoff in spec.cutoffs:
        report = evaluate_speculation(spark, EvalRequest(
            str(logs), cutoff, spec.horizon, spec.lookback, budget_per_user=spec.budget_per_user,
            budget_factor=spec.budget_factor, scorer=scorer))
        rows_known = report.get("future_rows_known") or 0
        known += rows_known
        ours += (report["coverage"] or 0.0) * rows_known
        for base, value in report["baselines"].items():
            baselines[base] = baselines.get(base, 0.0) + (value or 0.0) * rows_known
        selected.append(report.get("selected"))
        shapes.append(report.get("shape"))
        for days, (hit, total) in textbook_popularity(
                logs, cutoff, spec.lookback, spec.horizon, report["budget_per_user"]).items():
            got = textbook.get(days, (0, 0))
            textbook[days] = (got[0] + hit, got[1] + total)
        print(json.dumps({"shape": name, "cutoff": cutoff.isoformat(),
                          "coverage": report["coverage"], "selected": report.get("selected"),
                          "baselines": report["baselines"], "validation": report.get("validation"),
                          "seconds": report.get("seconds")}), file=sys.stderr)
    pooled = {base: round(v / known, 4) if known else None for base, v in baselines.items()}
    best = max((v for v in pooled.values() if v is not None), default=None)
    coverage = round(ours / known, 4) if known else None
    return {"coverage": coverage, "best_baseline": best,
            "best_baseline_name": max(pooled, key=lambda b: pooled[b] or 0) if pooled else None,
            "selected": selected, "baselines": pooled, "future_rows_known": known,
            "textbook_popularity": {f"{d}d": round(h / t, 4) if t else None
                                    for d, (h, t) in textbook.items()},
            "margin": round(coverage - best, 4) if None not in (coverage, best) else None,
            "shape": shapes[-1], "rows": rows, "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shapes")
    parser.add_argument("--size", choices=("bench", "test"), default="bench")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scorer", default="auto",
                        help="auto (validated choice) or a ranking to keep without validating")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from solaris_lib.config import load_settings
    from solaris_lib.sparkutil import get_spark

    spark = get_spark("solaris-bench-shapes", master=load_settings().spark_master)
    work = Path(tempfile.mkdtemp(prefix="solaris-shapes-"))
    try:
        results = {name: run_shape(spark, name, args.size, args.seed, work, args.scorer)
                   for name in args.shapes.split(",")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    margins = [r["margin"] for r in results.values() if r["margin"] is not None]
    sys.stdout.write(json.dumps({"shapes": results,
                                 "worst_margin": min(margins) if margins else None}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
