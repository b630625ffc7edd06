"""``solaris speculation-eval``: speculation's coverage on any contract logs, with baselines."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    from solaris_lib.speculation.config import SOURCES, MineConfig
    from solaris_lib.speculation.jobargs import (
        add_live_arguments,
        add_retrieval_arguments,
        default_lookback,
    )
    from solaris_lib.speculation.selection import RANKINGS

    cmd = subparsers.add_parser(
        "speculation-eval",
        help="run mine/retrieval/speculate at a cutoff and measure coverage on the horizon",
        description="Treats the logs before --cutoff as history and the --horizon after it as the "
        "future; runs the real speculation stages and prints coverage, waste and the "
        "single-source baselines (repeat, popularity, faiss) at the same budget.",
    )
    cmd.add_argument("--logs", required=True, help="request logs (dt=YYYY-MM-DD/hour=HH/*.parquet)")
    cmd.add_argument("--cutoff", required=True, help="ISO timestamp: history before, future after")
    cmd.add_argument("--horizon", default="7d", help="future window after the cutoff (e.g. 7d)")
    cmd.add_argument("--lookback", default=default_lookback(MineConfig),
                     help="history window before the cutoff (default %(default)s)")
    budget = cmd.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget-per-user", type=int, help="pairs precomputed per user")
    budget.add_argument("--budget-factor", type=float,
                        help="budget = this x mean distinct future pairs per known user")
    cmd.add_argument("--global-budget", type=int, default=None, help="cap on all pairs")
    cmd.add_argument("--allocation", choices=("per-user", "global"), default="per-user",
                     help="per-user: every known user keeps its budget's best pairs; global: "
                     "the same total goes to the best pairs across users (one user at most 4x)")
    cmd.add_argument("--faiss-k", type=int, default=0,
                     help="nearest live items per user from each FAISS source (the candidate "
                     "pool's depth; default 0: the budget per user)")
    add_live_arguments(cmd)
    add_retrieval_arguments(cmd, als_prefix="als-")
    cmd.add_argument("--scorer", choices=("auto", *RANKINGS), default="auto",
                     help="auto: the ranking that covered most of the latest labelled interval "
                     "(reported as selected); or one ranking")
    cmd.add_argument("--sources", default=",".join(SOURCES),
                     help=f"candidate sources, comma-separated (default {','.join(SOURCES)})")
    cmd.add_argument("--out", default=None, help="folder for pairs, report.json and the PNG")
    cmd.add_argument("--json", action="store_true", help="one JSON object as the last line")
    cmd.add_argument("--dump-candidates", default=None, metavar="DIR",
                     help="also write the scorer's training and scoring candidates with their "
                     "features, and the future rows, for benchmarks/scorer_replay.py")
    cmd.set_defaults(handler=_evaluate)


def _evaluate(args) -> int:
    from solaris_lib.config import load_settings
    from solaris_lib.errors import ConfigError, LogContractError
    from solaris_lib.intervals import parse_duration, parse_timestamp
    from solaris_lib.progress import Progress
    from solaris_lib.sparkutil import get_spark
    from solaris_lib.speculation.evaluate import EVAL_STAGES, EvalRequest, evaluate_speculation
    from solaris_lib.speculation.jobargs import live_overrides, retrieval_overrides
    from solaris_lib.storage import exists

    if not exists(args.logs):
        raise LogContractError(args.logs, "no such folder")
    settings = load_settings()
    if args.budget_per_user is not None and args.budget_per_user < 1:
        raise ConfigError("--budget-per-user must be at least 1")
    request = EvalRequest(
        logs=args.logs, cutoff=parse_timestamp(args.cutoff), horizon=parse_duration(args.horizon),
        lookback=parse_duration(args.lookback), budget_per_user=args.budget_per_user,
        budget_factor=args.budget_factor, global_budget=args.global_budget, scorer=args.scorer,
        out=args.out, allocation=args.allocation, faiss_k=args.faiss_k,
        live=live_overrides(args, settings), retrieval_fields=retrieval_overrides(args),
        dump=args.dump_candidates,
        sources=tuple(s.strip() for s in args.sources.split(",") if s.strip()),
    )
    spark = get_spark("solaris-speculation-eval", master=settings.spark_master)
    with Progress("speculation-eval", total=EVAL_STAGES):
        report = evaluate_speculation(spark, request)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        _print_summary(report)
    return 0


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _print_summary(report: dict) -> None:
    print(f"coverage (known users)  {_fmt(report['coverage'])}")
    print(f"coverage (all users)    {_fmt(report['coverage_all'])}")
    print(f"waste                   {_fmt(report['waste'])}")
    print(f"pairs precomputed       {report['pairs_precomputed']:,}")
    print(f"budget per user         {report['budget_per_user']}")
    print(f"ranking kept            {report.get('selected', 'n/a')}")
    for name, value in report["baselines"].items():
        print(f"baseline {name:<14} {_fmt(value)}")
    if report.get("note"):
        print(f"note: {report['note']}")
