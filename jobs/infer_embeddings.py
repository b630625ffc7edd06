"""spark-submit entrypoint: embed one interval's speculated pairs with the serving model.

    spark-submit jobs/infer_embeddings.py --start 2026-01-05T10:00 --end 2026-01-05T11:00
        [--model-version V] [--batch-users N]

Reads ``speculated/interval=KEY`` and ``mined/user_history/interval=KEY`` under
``SOLARIS_DATA_ROOT`` and writes ``embeddings/interval=KEY`` (user_id, item_id, model_version,
embedding fp16) atomically, then (unless ``SOLARIS_FALLBACK_CLUSTERS=0``) the hierarchical
fallback's ``embeddings/cluster``, ``embeddings/item_clusters`` and ``embeddings/item_prior``
partitions (``solaris_lib.transfer.fallback``). Prints the report as one JSON line; exit code 0
on success, 2 when an input partition or the model is missing, 5 when the model's outputs are
not finite.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from solaris_lib.config import load_settings
from solaris_lib.errors import SolarisError
from solaris_lib.model.commands import add_infer_arguments, infer_request
from solaris_lib.sparkutil import get_spark
from solaris_lib.transfer.fallback import embed_fallback_level

log = logging.getLogger("solaris.jobs.infer_embeddings")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_infer_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from solaris_lib.model.inference import run_inference

        settings = load_settings()
        request = infer_request(args)
        spark = get_spark("solaris-infer-embeddings")
        try:
            report = run_inference(spark, settings, request)
            fallback = embed_fallback_level(spark, settings, request.interval, report.model_version)
        finally:
            spark.stop()
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    sys.stdout.write(json.dumps({**report.as_dict(), "fallback": fallback}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
