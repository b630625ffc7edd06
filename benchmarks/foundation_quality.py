"""Foundation model vs the ID-only baseline: held-out log-loss and AUC on a simulated world.

Simulates a world (default: the simulator's default world), trains the foundation model on
all days but the last and evaluates both models on the last day (the train job's own code and
metrics). The peer is the ID-only baseline trained on the same pairs in the same run.
Last line: one JSON object with both models' figures and the relative log-loss gain.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from datetime import timedelta

from solaris_lib.config import load_settings
from solaris_lib.intervals import Interval
from solaris_lib.model.train import TrainRequest, run_training
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.world import Simulator


def main() -> None:
    defaults = WorldConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=defaults.users)
    parser.add_argument("--items", type=int, default=defaults.items)
    parser.add_argument("--days", type=int, default=defaults.days)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = tempfile.mkdtemp(prefix="solaris-bench-fm-")
    try:
        world = WorldConfig(users=args.users, items=args.items, days=args.days, seed=args.seed)
        Simulator(world).run(f"{work}/logs")
        window = Interval(world.start, world.start + timedelta(days=args.days))
        started = time.perf_counter()
        report = run_training(load_settings(data_root=work), TrainRequest(
            window, preset=args.preset, epochs=args.epochs, threads=args.threads))
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fm, base = report.metrics["foundation"], report.metrics["id_only"]
    print(json.dumps({
        "world": {"users": args.users, "items": args.items, "days": args.days, "seed": args.seed},
        "preset": args.preset, "train_requests": report.metrics["train_requests"],
        "holdout_pairs": fm["pairs"], "holdout_ctr": round(fm["ctr"], 5),
        "fm_log_loss": round(fm["log_loss"], 5), "fm_auc": round(fm["roc_auc"], 4),
        "id_only_log_loss": round(base["log_loss"], 5), "id_only_auc": round(base["roc_auc"], 4),
        "log_loss_gain_rel": round((base["log_loss"] - fm["log_loss"]) / base["log_loss"], 4),
        "fm_beats_id_only": fm["log_loss"] < base["log_loss"] and fm["roc_auc"] > base["roc_auc"],
        "train_seconds": report.metrics["train_seconds"], "total_seconds": round(seconds, 1),
    }))


if __name__ == "__main__":
    main()
