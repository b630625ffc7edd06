"""spark-submit entrypoint: publish one interval's embeddings to the Redis embedding cache.

    spark-submit jobs/publish_cache.py --start 2026-01-05T10:00 --end 2026-01-05T11:00

Reads ``embeddings/interval=KEY/`` under ``SOLARIS_DATA_ROOT``, writes a new version to
``SOLARIS_REDIS_URL`` under ``SOLARIS_REDIS_KEY_PREFIX``, verifies it and switches the alias
(``solaris_lib.cache.publish``). Prints the report as one JSON line; exit code 0 on success,
the error's code otherwise (2 bad input, 6 publish failed: the served version is unchanged).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from solaris_lib.cache.commands import add_publish_arguments, publish_request
from solaris_lib.cache.publish import publish
from solaris_lib.config import load_settings
from solaris_lib.errors import SolarisError
from solaris_lib.sparkutil import get_spark

log = logging.getLogger("solaris.jobs.publish_cache")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_publish_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings()
        interval, config = publish_request(args)
        spark = get_spark("solaris-publish-cache")
        try:
            report = publish(spark, settings, interval, config)
        finally:
            spark.stop()
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    sys.stdout.write(json.dumps(report.as_dict()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
