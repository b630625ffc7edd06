"""spark-submit entrypoint: ALS retrieval factors and the choice model over one lookback window.

    spark-submit solaris_lib/jobs/train_retrieval.py --start 2026-01-05 --end 2026-01-06 [--lookback 28d] \
        [--rank 32] [--max-iter 10] [--alpha 10] [--reg 0.1] \
        [--choice-dim 16] [--choice-reg 0.02] [--choice-steps 300] [--choice-half-life 3d]

Writes ``retrieval/interval=KEY/{users,items}`` (ALS) and ``{choice_users,choice_items}`` (the
choice model, ``solaris_lib/speculation/choice.py``, with RetrievalConfig's ``choice_*``
settings; torch, on the GPU when there is one), each (id, factor array<float>; ``choice_items``
also ``bias`` float), under
``SOLARIS_DATA_ROOT``. Prints one JSON line.
"""

import sys

from solaris_lib.intervals import Interval
from solaris_lib.orchestration.jobrunner import Job, run_job
from solaris_lib.speculation.config import RetrievalConfig
from solaris_lib.speculation.jobargs import (
    add_lookback_argument,
    add_retrieval_arguments,
    lookback_override,
    retrieval_overrides,
)


def _arguments(parser) -> None:
    add_lookback_argument(parser, RetrievalConfig)
    add_retrieval_arguments(parser)


def _prepare(args, settings):
    from solaris_lib.speculation.config import retrieval_config

    return Interval.parse(args.start, args.end), retrieval_config(
        **lookback_override(args), **retrieval_overrides(args))


def _run(spark, settings, request):
    from solaris_lib.layout import DataLayout
    from solaris_lib.speculation.pipeline import run_retrieval

    interval, config = request
    users = run_retrieval(spark, DataLayout.from_settings(settings), interval, config)
    return {"interval": interval.key, "users": users}


JOB = Job("train-retrieval", __doc__, _prepare, _run, _arguments)


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
