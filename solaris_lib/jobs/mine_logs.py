"""spark-submit entrypoint: mine the lookback window of one data interval.

    spark-submit solaris_lib/jobs/mine_logs.py --start 2026-01-05T10:00 --end 2026-01-05T11:00 [--lookback 28d]

Writes ``mined/{user_history,pair_stats,item_stats,user_stats,cooccurrence}/interval=KEY`` under
``SOLARIS_DATA_ROOT`` (see ``solaris_lib.speculation.mine``). Prints one JSON line: rows written
per table and the rows of the interval's log files that validation refused: ``quarantined``
({reason: rows}, as in the publish report) and ``quarantined_rows`` (the metric).
"""

import logging
import sys

from solaris_lib.intervals import Interval
from solaris_lib.orchestration.jobrunner import Job, run_job
from solaris_lib.speculation.config import MineConfig, mine_config
from solaris_lib.speculation.jobargs import add_lookback_argument, given, lookback_override

log = logging.getLogger(__name__)


def _arguments(parser) -> None:
    add_lookback_argument(parser, MineConfig)
    parser.add_argument("--max-history", type=int, default=None, help="newest events kept per "
                        f"user (default {MineConfig.model_fields['max_history'].default})")


def _prepare(args, settings):
    return Interval.parse(args.start, args.end), mine_config(
        **lookback_override(args), **given(max_history=args.max_history))


def _run(spark, settings, request):
    from solaris_lib.layout import DataLayout
    from solaris_lib.speculation.pipeline import run_mine

    interval, config = request
    layout = DataLayout.from_settings(settings)
    written = run_mine(spark, layout, interval, config)
    return {"interval": interval.key, "rows": written, **_refused(layout, interval)}


def _refused(layout, interval) -> dict:
    """``quarantined`` ({reason: rows}) and ``quarantined_rows`` of the interval's log files
    (None, with a warning, when the quarantine cannot be read: the mined tables are written
    and a retry would redo them for a figure)."""
    import pyarrow as pa

    from solaris_lib.logs.reader import quarantined_in

    try:
        refused = quarantined_in(layout.logs, interval, layout.quarantine)
    except (OSError, pa.ArrowException) as exc:
        log.warning("could not count the quarantined rows under %s: %s", layout.quarantine, exc)
        return {"quarantined": None, "quarantined_rows": None}
    if refused:
        log.warning("%d log rows of %s quarantined under %s: %s", sum(refused.values()),
                    interval, layout.quarantine, refused)
    return {"quarantined": refused, "quarantined_rows": sum(refused.values())}


JOB = Job("mine", __doc__, _prepare, _run, _arguments)


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
