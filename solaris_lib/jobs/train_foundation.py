"""Entrypoint: train the foundation model on a window of request logs, version and promote it.

    python -m solaris_lib.jobs.train_foundation --start 2026-01-05 --end 2026-01-11 [--holdout 1d]
        [--preset small] [--epochs N] [--processes N]

Trains on ``[start, end - holdout)``, evaluates on the held-out tail (FM and ID-only baseline),
writes ``<models root>/foundation/v=<key>-<hash8>/`` and promotes it when it is not worse than
the serving version. ``--processes N`` trains with N DDP workers through Spark's
TorchDistributor. Prints the report as one JSON line; exit code 0, or the error's code.
"""

import sys

from solaris_lib.model.commands import add_train_arguments, train_request
from solaris_lib.orchestration.jobrunner import Job, run_job


def _run(spark, settings, request):
    from solaris_lib.model.train import run_training

    return run_training(settings, request)


JOB = Job("train-foundation", __doc__, lambda args, settings: train_request(args), _run,
          add_train_arguments, spark=False, keyed=False)  # writes model versions, not partitions


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
