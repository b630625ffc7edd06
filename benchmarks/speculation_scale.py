"""Speculation stage scaling and FAISS recall.

Times the whole speculation stage (mine and retrieval, ALS and the choice model, of the previous
and the current daily interval, speculate with the learned scorer trained on the previous one,
all sources) on two simulated worlds of about 1M and 10M rows
(``--quick``: 100k and 1M), same Spark master, and reports seconds, rows/s and the ratio
``time(large) / time(small)`` beside the row ratio (near-linear scaling: the two ratios agree).

FAISS: recall@k of the IVF index against exact search (``IndexFlatIP``) on the large run's
vectors (IVF forced): the choice model's logit vectors, which the faiss source searches, and the
ALS factors; and on a 200k-vector synthetic catalogue, with both search times.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.world import Simulator
from solaris_lib.sparkutil import get_spark
from solaris_lib.speculation.candidates import faiss_feature, faiss_vectors
from solaris_lib.speculation.config import MineConfig, RetrievalConfig, SpeculateConfig
from solaris_lib.speculation.faiss_index import build_index, exact_top_k, load_index, recall_at_k
from solaris_lib.speculation.pipeline import (
    load_mined,
    retrieval_keys,
    run_mine,
    run_retrieval,
    run_speculate,
)

SIZES = {"quick": [(200, 1000, 5), (1000, 2000, 10)], "full": [(1000, 2000, 10), (7000, 5000, 14)]}
BUDGET = 200


def stage_seconds(spark, root: Path, cfg: WorldConfig) -> dict:
    """Simulate, then time mine + retrieval of the day before the last full day and of that
    day, and speculate of the last full day (the scorer learns on the day before, with the
    FAISS sources: its factors exist, as they do in a pipeline that runs every day)."""
    result = Simulator(cfg).run(str(root / "logs"))
    layout = DataLayout(root=str(root), models_root=str(root / "models"))
    end = cfg.start + timedelta(days=cfg.days)
    interval = Interval(end - timedelta(days=1), end)
    started = time.perf_counter()
    for day in (interval.previous(), interval):  # the scorer trains on the previous day
        run_mine(spark, layout, day, MineConfig())
        run_retrieval(spark, layout, day, RetrievalConfig())
    report = run_speculate(spark, layout, interval, SpeculateConfig(budget_per_user=BUDGET))
    seconds = time.perf_counter() - started
    return {"rows": result.rows, "users": cfg.users, "days": cfg.days, "seconds": round(seconds, 1),
            "rows_per_s": round(result.rows / seconds), "pairs": report["pairs"],
            "scorer": report["scorer"], "layout": layout, "interval": interval}


def ivf_recall(ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray, k: int) -> dict:
    """IVF (forced) vs exact: recall@k on held-out queries and search times (ms per query)."""
    built = build_index(ids, vectors, exact_threshold=0, k=k, queries=queries[: len(queries) // 2])
    test = np.ascontiguousarray(queries[len(queries) // 2:], dtype=np.float32)
    index = load_index(built.blob, built.nprobe)
    started = time.perf_counter()
    _, found = index.search(test, k)
    ivf_ms = (time.perf_counter() - started) * 1000 / len(test)
    started = time.perf_counter()
    truth = ids[exact_top_k(vectors, test, k)]
    exact_ms = (time.perf_counter() - started) * 1000 / len(test)
    return {"items": len(ids), "k": k, "nprobe": built.nprobe, "recall": recall_at_k(found, truth),
            "ivf_ms_per_query": round(ivf_ms, 3), "exact_ms_per_query": round(exact_ms, 3)}


def retrieval_recall(spark, layout: DataLayout, interval: Interval, k: int) -> dict:
    """IVF recall on the large run's retrieval vectors as the speculate job loads them
    (:func:`load_mined` of :func:`retrieval_keys`; all items, IVF forced, where the job searches exactly below
    ``exact_threshold``): :func:`candidates.faiss_vectors`, the vectors the faiss source
    searches (the choice model's logit at the items' current rate), and the raw ALS factors,
    which it searches without choice vectors."""
    mined = load_mined(spark, layout, interval, retrieval_keys(layout, interval)[0])
    if faiss_feature(mined) != "choice":
        raise SystemExit(f"the retrieval of {interval.key} wrote no choice vectors with a bias")
    users, items = faiss_vectors(mined)
    return {"choice_searched": _recall(items, users, k),
            "als": _recall(mined.item_factors, mined.user_factors, k)}


def _recall(items, users, k: int) -> dict:
    """:func:`ivf_recall` of (item_id, factor) against the first 2,000 users' (user_id, factor)."""
    items = items.orderBy("item_id").toPandas()
    users = users.orderBy("user_id").limit(2000).toPandas()
    vectors = np.stack(items["factor"].to_numpy()).astype(np.float32)
    queries = np.stack(users["factor"].to_numpy()).astype(np.float32)
    return ivf_recall(items["item_id"].to_numpy(np.int64), vectors, queries, k)


def synthetic_recall(n: int, k: int) -> dict:
    """IVF recall on ``n`` clustered random 32-d vectors (a catalogue above the exact threshold)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(64, 32))
    vectors = (centres[rng.integers(0, 64, n)] + 0.5 * rng.normal(size=(n, 32))).astype(np.float32)
    queries = (centres[rng.integers(0, 64, 1000)] + 0.5 * rng.normal(size=(1000, 32))).astype(np.float32)
    return ivf_recall(np.arange(n, dtype=np.int64), vectors, queries, k)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100k and 1M rows instead of 1M and 10M")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = get_spark("solaris-bench-speculation", master=args.master)
    work = Path(tempfile.mkdtemp(prefix="solaris-bench-spec-"))
    try:
        runs = []
        for i, (users, items, days) in enumerate(SIZES["quick" if args.quick else "full"]):
            cfg = WorldConfig(users=users, items=items, days=days, seed=11)
            runs.append(stage_seconds(spark, work / f"w{i}", cfg))
        small, large = runs
        recall = {**retrieval_recall(spark, large["layout"], large["interval"], BUDGET),
                  "synthetic": synthetic_recall(50_000 if args.quick else 200_000, 100)}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    for run in runs:
        del run["layout"], run["interval"]
    print(json.dumps({
        "benchmark": "speculation_scale", "master": args.master, "quick": args.quick,
        "small": small, "large": large,
        "row_ratio": round(large["rows"] / small["rows"], 2),
        "time_ratio": round(large["seconds"] / small["seconds"], 2),
        "scaling_efficiency": round((large["rows"] / small["rows"]) / (large["seconds"] / small["seconds"]), 3),
        "faiss_recall": recall,
    }))


if __name__ == "__main__":
    main()
