"""spark-submit entrypoint: serving metrics of the previously published version on this interval.

    spark-submit solaris_lib/jobs/evaluate.py --start 2026-01-05T10:00 --end 2026-01-05T11:00

Scores the pairs precomputed in the previous interval (``embeddings/interval=PREV``, what the
cache serves now) against this interval's request logs: coverage, waste, staleness, and client
lookup latency from a replay of sampled requests (``solaris_lib.evaluation.serving``). Writes
``evaluation/interval=KEY/metrics.json`` atomically and prints it as one JSON line.
"""

import sys

from solaris_lib.intervals import Interval
from solaris_lib.orchestration.jobrunner import Job, run_job


def _arguments(parser) -> None:
    parser.add_argument("--replay-requests", type=int, default=200,
                        help="requests replayed through the client (0: no latency replay)")


def _run(spark, settings, request):
    from solaris_lib.evaluation.serving import evaluate_serving, write_evaluation
    from solaris_lib.layout import DataLayout

    interval, replay = request
    result = evaluate_serving(spark, settings, interval, replay_requests=replay)
    write_evaluation(DataLayout.from_settings(settings), result, interval)
    return result


JOB = Job("evaluate", __doc__,
          lambda args, settings: (Interval.parse(args.start, args.end), args.replay_requests),
          _run, _arguments)


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
