"""Entrypoint: train the foundation model on a window of request logs, version and promote it.

    python jobs/train_foundation.py --start 2026-01-05 --end 2026-01-11 [--holdout 1d]
        [--preset small] [--epochs N] [--processes N]

Trains on ``[start, end - holdout)``, evaluates on the held-out tail (FM and ID-only baseline),
writes ``<models root>/foundation/v=<key>-<hash8>/`` and promotes it when it is not worse than
the serving version. ``--processes N`` trains with N DDP workers through Spark's
TorchDistributor. Prints the report as one JSON line; exit code 0, or the error's code.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from solaris_lib.config import load_settings
from solaris_lib.errors import SolarisError
from solaris_lib.model.commands import add_train_arguments, train_request

log = logging.getLogger("solaris.jobs.train_foundation")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from solaris_lib.model.train import run_training

        report = run_training(load_settings(), train_request(args))
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    sys.stdout.write(json.dumps(report.as_dict()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
