"""spark-submit entrypoint: the pairs the interval after this one will score, under budgets.

    spark-submit solaris_lib/jobs/speculate.py --start 2026-01-05T10:00 --end 2026-01-05T11:00 \
        [--budget-per-user 200] [--global-budget N] [--max-per-user M] [--faiss-k K]
        [--live-window 2d] [--live-gaps 3] [--live-tail-share 0.02]
        [--scorer auto|learned|heuristic]

Reads ``mined/*/interval=KEY`` (run ``mine_logs`` first), the newest retrieval factors fitted on
logs up to the interval's end (a rerun: those the run read), and the misses stream when
``SOLARIS_REDIS_URL`` answers and the ``miss`` source is on (the interval's entries, and
the previous interval's for the learned scorer's labelled candidates); writes
``speculated/interval=KEY`` (user_id, item_id, score, sources). Prints one JSON line.
"""

import logging
import sys

from solaris_lib.intervals import Interval
from solaris_lib.orchestration.jobrunner import Job, run_job
from solaris_lib.speculation.jobargs import add_live_arguments, live_overrides

SCORERS = ("auto", "learned", "heuristic")  # --scorer; the precompute DAG's ``scorer`` param
log = logging.getLogger(__name__)


def _arguments(parser) -> None:
    parser.add_argument("--budget-per-user", type=int, default=None,
                        help="pairs kept per user (default: SOLARIS_SPECULATE_BUDGET_PER_USER)")
    parser.add_argument("--global-budget", type=int, default=None,
                        help="pairs kept in total (default: SOLARIS_SPECULATE_GLOBAL_BUDGET)")
    parser.add_argument("--max-per-user", type=int, default=None,
                        help="with a global budget, most pairs one user keeps (default: "
                        "SOLARIS_SPECULATE_MAX_PER_USER, else the budget per user)")
    parser.add_argument("--faiss-k", type=int, default=None,
                        help="nearest live items per user from each FAISS source, the candidate "
                        "pool's depth (default: SOLARIS_SPECULATE_FAISS_K, else the budget per "
                        "user)")
    add_live_arguments(parser)
    parser.add_argument("--scorer", choices=SCORERS, default="auto")
    parser.add_argument("--no-misses", action="store_true", help="do not read the misses stream")


def _prepare(args, settings):
    from solaris_lib.speculation.config import speculate_config

    config = speculate_config(
        budget_per_user=args.budget_per_user or settings.speculate_budget_per_user,
        global_budget=args.global_budget or settings.speculate_global_budget,
        max_per_user=args.max_per_user or settings.speculate_max_per_user or 0,
        faiss_k=args.faiss_k or settings.speculate_faiss_k or 0,
        scorer=args.scorer, **live_overrides(args, settings))
    if config.max_per_user and config.user_cap() != config.max_per_user:
        log.warning("max_per_user %d ignored: it caps a user's share of a global budget, and "
                    "this run has none (each user keeps budget_per_user %d pairs)",
                    config.max_per_user, config.budget_per_user)
    return Interval.parse(args.start, args.end), config, not args.no_misses


def _run(spark, settings, request):
    from solaris_lib.layout import DataLayout
    from solaris_lib.runs import earlier_report
    from solaris_lib.speculation.misses import against_earlier_read, misses_frame, read_stream
    from solaris_lib.speculation.pipeline import run_speculate

    interval, config, with_misses = request
    found = past = None
    if with_misses and "miss" in config.sources:
        found = read_stream(settings.redis_url, settings.redis_key_prefix, interval)
        if config.fits_scorer():  # the learned scorer's labelled candidates
            past = read_stream(settings.redis_url, settings.redis_key_prefix,
                               interval.previous())
    report = run_speculate(spark, DataLayout.from_settings(settings), interval, config,
                           misses_frame(spark, found and found.rows),
                           misses_frame(spark, past and past.rows))
    report["misses"] = found.as_dict() if found is not None else None
    if past is not None:
        earlier = earlier_report(settings, JOB.name, interval.previous()) or {}
        report["misses_previous"] = against_earlier_read(past, earlier.get("misses"))
    else:
        report["misses_previous"] = None
    return report


JOB = Job("speculate", __doc__, _prepare, _run, _arguments)


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
