"""spark-submit entrypoint: serving metrics of the previously published version on this interval.

    spark-submit jobs/evaluate.py --start 2026-01-05T10:00 --end 2026-01-05T11:00

Scores the pairs precomputed in the previous interval (``embeddings/interval=PREV``, what the
cache serves now) against this interval's request logs: coverage, waste, staleness, and client
lookup latency from a replay of sampled requests (``solaris_lib.evaluation.serving``). Writes
``evaluation/interval=KEY/metrics.json`` atomically and prints it as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from solaris_lib.config import load_settings
from solaris_lib.errors import SolarisError
from solaris_lib.evaluation.serving import evaluate_serving, write_evaluation
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout
from solaris_lib.sparkutil import get_spark

log = logging.getLogger("solaris.jobs.evaluate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True, help="data interval start (ISO 8601, UTC)")
    parser.add_argument("--end", required=True, help="data interval end (ISO 8601, UTC)")
    parser.add_argument("--replay-requests", type=int, default=200,
                        help="requests replayed through the client (0: no latency replay)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings()
        interval = Interval.parse(args.start, args.end)
        spark = get_spark("solaris-evaluate")
        try:
            result = evaluate_serving(spark, settings, interval,
                                      replay_requests=args.replay_requests)
        finally:
            spark.stop()
        path = write_evaluation(DataLayout.from_settings(settings), result, interval)
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    log.info("wrote %s", path)
    sys.stdout.write(json.dumps(result.as_dict(), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
