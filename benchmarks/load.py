"""Load: several processes look up at a sustained rate while a new cache version is published.

Each process holds its own ``SolarisClient`` and calls ``lookup(user, 200 items)`` (dimension
64, fp16) ``--rate`` times per second for ``--seconds``; after ``--publish-at`` of the run the
next interval's embeddings are published with the real publisher (Spark local[2]) and the
alias switches under the readers. Both versions hold the same pairs with version-specific
values, so a lookup whose rows came from two versions is detected (``mixed_versions``, must
be 0). Runs on a private redis-server. The floor is the same run's own steady state: p99
while the publish runs against p99 before it (``ratio_p99_during_vs_before``). Per phase
(before, during and after the publish): lookups, timeouts and their share, errors,
exceptions (lookups that raised: the contract says none) and mixed versions. Targets at the
default 1,000 lookups/s: 0 exceptions, 0 mixed versions, timeouts <= 0.1 % (``ok``).
Last line: one JSON object (see ``solaris_lib.devtools.loadtest``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from solaris_lib.devtools.loadtest import LoadConfig, run_load
from solaris_lib.sparkutil import get_spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=250.0, help="lookups/s per process")
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--publish-at", type=float, default=0.4,
                        help="share of the run after which the second publish starts")
    parser.add_argument("--timeout-ms", type=float, default=20.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    config = LoadConfig(processes=args.processes, seconds=args.seconds, rate=args.rate,
                        users=args.users, publish_at=args.publish_at, timeout_ms=args.timeout_ms)
    spark = get_spark("solaris-bench-load", master="local[2]")
    try:
        figures = run_load(spark, config)
    finally:
        spark.stop()
    figures["targets"] = {"exceptions": 0, "mixed_versions": 0, "timeout_rate_max": 0.001,
                          "lookups_per_s": 1000}
    figures["ok"] = (figures["exceptions"] == 0 and figures["mixed_versions"] == 0
                     and (figures["timeout_rate"] or 0.0) <= 0.001)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
