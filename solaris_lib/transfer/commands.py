"""``solaris report``: the knowledge-transfer report on a held-out period of request logs."""

from __future__ import annotations

import json
import logging

from solaris_lib.intervals import parse_duration

log = logging.getLogger(__name__)

# --simulate NAME: (WorldConfig fields, experiment overrides). The FM trains on every day before
# the ranker day: the quick world gives it eight (with two, on 400 or 600 users, its gain over
# plain was not distinguishable from zero); its cost is the FM's few seconds, not the replay's.
WORLDS = {
    "quick": ({"users": 400, "items": 600, "days": 10, "seed": 7},
              {"interval": "12h", "ranker_days": 1.0, "test_days": 1.0, "budget_per_user": 100,
               "clusters": 16}),
    "demo": ({"users": 1500, "items": 2000, "days": 6, "seed": 7},
             {"interval": "6h", "ranker_days": 1.0, "test_days": 1.0}),
    "default": ({"users": 2000, "items": 5000, "days": 14, "seed": 7},
                {"interval": "12h", "ranker_days": 1.0, "test_days": 1.0, "lookback": "2d"}),
}
_OPTIONS = ("interval", "lookback", "scorer", "ranker_days", "test_days", "budget_per_user",
            "clusters", "fm_epochs", "fm_days", "fm_model", "fm_preset", "seed", "threads")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="knowledge-transfer report: plain vs distilled vs SOLARIS vs the FM",
        description="Trains the FM before the ranker period, rebuilds each interval's cache from "
        "the previous interval's speculation run, trains the ranker variants on the same rows and "
        "scores them on the held-out period. Last line of output: one JSON object.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--logs", help="request-log folder (dt=/hour= partitions)")
    src.add_argument("--simulate", choices=sorted(WORLDS), default=None,
                     help="simulate this world under OUT/world first (default: quick)")
    p.add_argument("--out", default="var/report", help="folder for report.{json,md,png}")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("--interval", type=parse_duration, help="cache interval length, e.g. 6h")
    p.add_argument("--lookback", type=parse_duration,
                   help="history each speculation run mines, e.g. 2d (default 7d)")
    p.add_argument("--scorer", choices=("auto", "learned", "heuristic"),
                   help="speculation scorer (default auto: learned on the previous interval)")
    p.add_argument("--ranker-days", type=float, help="days of ranker training rows")
    p.add_argument("--test-days", type=float, help="held-out days at the end")
    p.add_argument("--budget-per-user", type=int, help="pairs speculated per user and interval")
    p.add_argument("--clusters", type=int, help="k-means item clusters of the fallback")
    p.add_argument("--fm-epochs", type=int, help="most FM epochs (default: the preset's; the "
                   "best validation epoch is kept)")
    p.add_argument("--fm-days", type=float, help="FM trains on this many days before the ranker "
                   "period (default: all of them)")
    p.add_argument("--fm-model", choices=("foundation", "two_tower"),
                   help="which shipped model is the FM (default foundation)")
    p.add_argument("--fm-preset", help="foundation model preset (default small)")
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int, help="torch threads (default 2)")
    p.add_argument("--reuse-rows", action="store_true",
                   help="re-evaluate the ranker rows saved under OUT/rows by an earlier run "
                   "(same logs and options) instead of rebuilding them")
    p.set_defaults(handler=_report)


def experiment_config(args, world: str | None):
    """TransferConfig from the world's defaults overridden by the given options."""
    from solaris_lib.transfer.config import TransferConfig

    fields = dict(WORLDS[world][1]) if world else {}
    for key in ("interval", "lookback"):
        if key in fields:
            fields[key] = parse_duration(fields[key])
    fields.update({k: getattr(args, k) for k in _OPTIONS if getattr(args, k) is not None})
    return TransferConfig(**fields)


def simulate_world(name: str, out: str) -> str:
    from pathlib import Path

    from solaris_lib.simulate.config import WorldConfig
    from solaris_lib.simulate.world import Simulator

    logs = str(Path(out) / "world")
    result = Simulator(WorldConfig(**WORLDS[name][0])).run(logs, overwrite=True)
    log.info("simulated world %s: %d rows in %.1f s", name, result.rows, result.seconds)
    return logs


def _report(args) -> int:
    from pathlib import Path

    from solaris_lib.config import load_settings
    from solaris_lib.sparkutil import spark_session
    from solaris_lib.transfer.experiment import run_experiment
    from solaris_lib.transfer.output import (
        coverage_table,
        headline_line,
        transfer_table,
        write_outputs,
    )

    world = None if args.logs else (args.simulate or "quick")
    config = experiment_config(args, world)
    if args.logs:
        logs = args.logs
    elif args.reuse_rows:
        logs = str(Path(args.out) / "world")
    else:
        logs = simulate_world(world, args.out)
    with spark_session("solaris-report", master=load_settings().spark_master,
                       conf={"spark.sql.shuffle.partitions": "4"}) as spark:
        report = run_experiment(spark, logs, config, rows_dir=str(Path(args.out) / "rows"),
                                reuse_rows=args.reuse_rows)
    report["world"] = world
    report["files"] = write_outputs(report, args.out)
    if not args.json:
        print(transfer_table(report))
        print(headline_line(report))
        print(coverage_table(report))
        print(f"report in {report['files']['md']}")
    print(json.dumps(_headline(report), default=str))
    return 0


def _headline(report: dict) -> dict:
    keys = ("transfer_ratio_logloss", "transfer_ratio_logloss_ci", "transfer_ratio_note",
            "embedding_share", "embedding_share_ci", "fm_gain_over_plain", "transfer_ratio_auc",
            "transfer_ratio_logloss_fallback", "transfer_ratio_auc_fallback", "coverage",
            "coverage_with_fallback", "coverage_by_level", "miss_by_cause", "variants", "logloss",
            "auc", "exact_hit_auc", "exact_hit_auc_delta", "solaris_over_distilled",
            "solaris_beats_distilled", "staleness_p50_min", "staleness_p99_min", "train_rows",
            "test_rows", "world", "seconds", "files")
    return {k: report.get(k) for k in keys}
