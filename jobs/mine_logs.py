"""spark-submit entrypoint: mine the lookback window of one data interval.

    spark-submit jobs/mine_logs.py --start 2026-01-05T10:00 --end 2026-01-05T11:00 [--lookback 28d]

Writes ``mined/{user_history,pair_stats,item_stats,user_stats,cooccurrence}/interval=KEY`` under
``SOLARIS_DATA_ROOT`` (see ``solaris_lib.speculation.mine``). Prints one JSON line of row counts.
"""

from __future__ import annotations

import json
import logging
import sys

from solaris_lib.config import load_settings
from solaris_lib.errors import SolarisError
from solaris_lib.layout import DataLayout
from solaris_lib.sparkutil import get_spark
from solaris_lib.speculation.config import MineConfig
from solaris_lib.speculation.jobargs import (
    base_parser,
    configure_job_logging,
    interval_of,
    lookback_of,
)
from solaris_lib.speculation.pipeline import run_mine

log = logging.getLogger("solaris.jobs.mine_logs")


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--max-history", type=int, default=200, help="events kept per user")
    args = parser.parse_args(argv)
    configure_job_logging()
    try:
        interval = interval_of(args)
        config = MineConfig(lookback=lookback_of(args), max_history=args.max_history)
        layout = DataLayout.from_settings(load_settings())
        spark = get_spark("solaris-mine")
        try:
            written = run_mine(spark, layout, interval, config)
        finally:
            spark.stop()
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    sys.stdout.write(json.dumps({"interval": interval.key, "rows": written}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
