"""Arguments shared by the speculation jobs (spark-submit entrypoints in ``jobs/``)."""

from __future__ import annotations

import argparse
import logging
import sys

from solaris_lib.intervals import Interval, parse_duration


def base_parser(description: str) -> argparse.ArgumentParser:
    """``--start ISO --end ISO`` (the data interval) and ``--lookback``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--start", required=True, help="data interval start (ISO-8601, UTC)")
    parser.add_argument("--end", required=True, help="data interval end (ISO-8601, UTC)")
    parser.add_argument("--lookback", default="28d", help="history window before --end")
    return parser


def interval_of(args) -> Interval:
    return Interval.parse(args.start, args.end)


def lookback_of(args):
    return parse_duration(args.lookback)


def configure_job_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
