"""``solaris simulate`` and ``solaris summarize-world``."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from solaris_lib.intervals import parse_timestamp


def register(subparsers) -> None:
    sim = subparsers.add_parser(
        "simulate",
        help="write a synthetic world of ad requests as partitioned request logs",
        description="Deterministic by seed. Writes DIR/dt=YYYY-MM-DD/hour=HH/*.parquet and the "
        "ground truth (campaigns, users, config) under DIR/_world/.",
    )
    sim.add_argument("--out", required=True, help="output folder (must be empty)")
    sim.add_argument("--users", type=int, default=None)
    sim.add_argument("--items", type=int, default=None, help="live catalogue size")
    sim.add_argument("--days", type=int, default=None)
    sim.add_argument("--seed", type=int, default=None)
    sim.add_argument("--start", default=None, help="UTC midnight of day 0 (ISO date)")
    sim.add_argument("--candidates", type=int, default=None, help="items scored per request")
    sim.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="any other WorldConfig field, e.g. --set mix_popular=0.2 (repeatable)",
    )
    sim.add_argument("--shape", default=None, metavar="NAME",
                     help="write a log of another shape at the benchmark's size instead of the "
                     "default world: impressions, ratings, sessions or long_lived "
                     "(solaris_lib/simulate/shapes.py; --seed applies, the other options not)")
    sim.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    sim.add_argument("--json", action="store_true", help="print the result as JSON")
    sim.set_defaults(handler=_simulate)

    summ = subparsers.add_parser(
        "summarize-world", help="realism statistics of a log folder (from the logs alone)"
    )
    summ.add_argument("logs", help="log folder")
    summ.add_argument("--json", action="store_true")
    summ.set_defaults(handler=_summarize)


def _world_config(args):
    from solaris_lib.errors import ConfigError
    from solaris_lib.simulate.config import WorldConfig

    fields = {
        "users": args.users, "items": args.items, "days": args.days, "seed": args.seed,
        "candidates_per_request": args.candidates,
        "start": parse_timestamp(args.start) if args.start else None,
    }
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        fields[key.strip()] = value.strip()
    try:
        return WorldConfig(**{k: v for k, v in fields.items() if v is not None})
    except ValueError as exc:
        raise ConfigError(f"invalid world config: {exc}") from exc


def _simulate(args) -> int:
    from solaris_lib.progress import Progress
    from solaris_lib.simulate.world import Simulator

    if args.shape is not None:
        return _simulate_shape(args)
    config = _world_config(args)
    with Progress("simulate", total=config.days + 1):  # the days, then the ground truth
        result = Simulator(config).run(args.out, overwrite=args.overwrite)
    line = {
        "out": result.out, "rows": result.rows, "requests": result.requests,
        "files": result.files, "seconds": round(result.seconds, 2),
        "rows_per_s": round(result.rows_per_s),
    }
    print(json.dumps(line) if args.json else
          f"wrote {result.rows:,} rows ({result.requests:,} requests, {result.files} files) "
          f"to {result.out} in {result.seconds:.1f} s ({result.rows_per_s:,.0f} rows/s)")
    return 0


def _simulate_shape(args) -> int:
    from solaris_lib.errors import ConfigError
    from solaris_lib.simulate.shapes import SHAPES, shape

    if args.shape not in SHAPES:
        raise ConfigError(f"--shape must be one of {', '.join(SHAPES)}")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise ConfigError(f"{out} is not empty; pass --overwrite to replace it")
    if out.exists() and args.overwrite:
        shutil.rmtree(out)
    spec = shape(args.shape, "bench", args.seed if args.seed is not None else 7)
    started = time.perf_counter()
    rows = spec.write(str(out))
    line = {"out": str(out.resolve()), "shape": spec.name, "rows": rows,
            "cutoffs": [c.isoformat() for c in spec.cutoffs],
            "horizon_s": spec.horizon.total_seconds(), "lookback_s": spec.lookback.total_seconds(),
            "budget_per_user": spec.budget_per_user, "budget_factor": spec.budget_factor,
            "seconds": round(time.perf_counter() - started, 2)}
    print(json.dumps(line) if args.json else
          f"wrote {rows:,} rows of the {spec.name} shape to {line['out']}; evaluate at "
          f"{', '.join(line['cutoffs'])}")
    return 0


def _summarize(args) -> int:
    from solaris_lib.simulate.summary import format_summary, summarize

    summary = summarize(args.logs)
    print(json.dumps(summary.as_dict()) if args.json else format_summary(summary))
    return 0
