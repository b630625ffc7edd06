"""spark-submit entrypoint: ALS retrieval factors and the choice model over one lookback window.

    spark-submit jobs/train_retrieval.py --start 2026-01-05 --end 2026-01-06 [--lookback 28d] \
        [--rank 32] [--max-iter 10] [--alpha 10] [--reg 0.1]

Writes ``retrieval/interval=KEY/{users,items}`` (ALS) and ``{choice_users,choice_items}`` (the
choice model, ``solaris_lib/speculation/choice.py``, with RetrievalConfig's ``choice_*``
settings; torch, on the GPU when there is one), each (id, factor array<float>), under
``SOLARIS_DATA_ROOT``. Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import sys

from solaris_lib.config import load_settings
from solaris_lib.errors import SolarisError
from solaris_lib.layout import DataLayout
from solaris_lib.sparkutil import get_spark
from solaris_lib.speculation.config import retrieval_config
from solaris_lib.speculation.jobargs import (
    add_als_arguments,
    als_overrides,
    base_parser,
    configure_job_logging,
    interval_of,
    lookback_of,
)
from solaris_lib.speculation.pipeline import run_retrieval

log = logging.getLogger("solaris.jobs.train_retrieval")


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    add_als_arguments(parser)
    args = parser.parse_args(argv)
    configure_job_logging()
    try:
        interval = interval_of(args)
        config = retrieval_config(lookback=lookback_of(args), **als_overrides(args))
        layout = DataLayout.from_settings(load_settings())
        spark = get_spark("solaris-train-retrieval")
        try:
            users = run_retrieval(spark, layout, interval, config)
        finally:
            spark.stop()
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    sys.stdout.write(json.dumps({"interval": interval.key, "users": users}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
