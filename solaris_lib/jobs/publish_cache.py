"""spark-submit entrypoint: publish one interval's embeddings to the Redis embedding cache.

    spark-submit solaris_lib/jobs/publish_cache.py --start 2026-01-05T10:00 --end 2026-01-05T11:00

Reads ``embeddings/interval=KEY/`` (and the fallback tables beside it) under
``SOLARIS_DATA_ROOT``, writes a new version to ``SOLARIS_REDIS_URL`` under
``SOLARIS_REDIS_KEY_PREFIX``, verifies it and switches the alias (``solaris_lib.cache.publish``).
Prints the report as one JSON line; exit code 0, or 2 for bad input, 6 when the publish failed
(the served version is unchanged).
"""

import sys

from solaris_lib.cache.commands import add_publish_arguments, publish_request
from solaris_lib.orchestration.jobrunner import Job, run_job


def _run(spark, settings, request):
    from solaris_lib.cache.publish import publish

    interval, config = request
    return publish(spark, settings, interval, config)


JOB = Job("publish-cache", __doc__, lambda args, settings: publish_request(args), _run,
          add_publish_arguments)


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
