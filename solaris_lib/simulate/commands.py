"""``solaris simulate`` and ``solaris summarize-world``."""

from __future__ import annotations

import json

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
    from solaris_lib.simulate.world import Simulator

    result = Simulator(_world_config(args)).run(args.out, overwrite=args.overwrite)
    line = {
        "out": result.out, "rows": result.rows, "requests": result.requests,
        "files": result.files, "seconds": round(result.seconds, 2),
        "rows_per_s": round(result.rows_per_s),
    }
    print(json.dumps(line) if args.json else
          f"wrote {result.rows:,} rows ({result.requests:,} requests, {result.files} files) "
          f"to {result.out} in {result.seconds:.1f} s ({result.rows_per_s:,.0f} rows/s)")
    return 0


def _summarize(args) -> int:
    from solaris_lib.simulate.summary import format_summary, summarize

    summary = summarize(args.logs)
    print(json.dumps(summary.as_dict()) if args.json else format_summary(summary))
    return 0
