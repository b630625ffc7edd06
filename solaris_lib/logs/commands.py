"""``solaris validate-logs DIR``: check request-log files against the contract."""

from __future__ import annotations

import json
import sys

from solaris_lib.errors import LogContractError


def register(subparsers) -> None:
    cmd = subparsers.add_parser(
        "validate-logs",
        help="check request logs against the contract; quarantine bad rows",
        description="Reports, per file, rows read and rows quarantined with the reason. Bad rows "
        "are written with their reason under the quarantine folder. Exits 2 when a file is "
        "unreadable or a required column is missing or mistyped.",
    )
    cmd.add_argument("logs", help="folder of request logs (dt=YYYY-MM-DD/hour=HH/*.parquet)")
    cmd.add_argument("--quarantine", default=None, help="where bad rows go (default LOGS/_quarantine)")
    cmd.add_argument("--json", action="store_true", help="one JSON object as the last line")
    cmd.set_defaults(handler=_validate)


def _validate(args) -> int:
    from solaris_lib.logs.validate import validate_dir
    from solaris_lib.storage import exists

    if not exists(args.logs):
        raise LogContractError(args.logs, "no such folder")
    reports = validate_dir(args.logs, args.quarantine)
    if not reports:
        raise LogContractError(args.logs, "no parquet files found")
    failed = [r for r in reports if r.error]
    totals = {
        "files": len(reports),
        "files_failed": len(failed),
        "rows_read": sum(r.rows_read for r in reports),
        "rows_valid": sum(r.rows_valid for r in reports),
        "rows_quarantined": sum(r.rows_quarantined for r in reports),
    }
    if args.json:
        print(json.dumps({**totals, "reports": [r.as_dict() for r in reports]}))
    else:
        _print_table(reports, totals)
    for report in failed:
        print(f"solaris validate-logs: error: {report.path}: {report.error}", file=sys.stderr)
    return LogContractError.exit_code if failed else 0


def _print_table(reports, totals) -> None:
    print(f"{'file':<60} {'read':>10} {'quarantined':>12}  reasons")
    for r in reports:
        name = r.path if len(r.path) <= 60 else "..." + r.path[-57:]
        if r.error:
            print(f"{name:<60} {'-':>10} {'-':>12}  ERROR: {r.error}")
            continue
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(r.quarantined.items()))
        notes = "; ".join(r.notes)
        print(f"{name:<60} {r.rows_read:>10,} {r.rows_quarantined:>12,}  {reasons}"
              + (f"  [{notes}]" if notes else ""))
    print(f"{totals['files']} files, {totals['rows_read']:,} rows read, "
          f"{totals['rows_quarantined']:,} quarantined, {totals['files_failed']} failed")
