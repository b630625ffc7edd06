"""A pipeline stage's spark-submit with and without the Spark class archive (``sparkcds``).

The stage is the one the DAG's ``mine`` task submits, with the application, arguments and Spark
properties the task's operator gets (``sparkconf.submission`` for a ``local[2]`` connection, as
in ``make demo``) and the JVM options of the caller's ``SPARK_SUBMIT_OPTS`` (none by default,
as in a deployment), on one hour of a small simulated world: small on purpose, so that the
figure is what the archive changes, the JVM's start-up. Runs alternate (without, with) so that a
change in the machine's load touches both. Wall seconds and CPU seconds (the spark-submit and all
its descendants: launcher, JVM, Python driver, Python workers) per run; ``ratio_wall`` and
``ratio_cpu`` = with / without (medians), below 1 when the archive helps. Last line: one JSON
object.

    python benchmarks/spark_startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from solaris_lib import sparkcds
from solaris_lib.config import SolarisSettings, settings_env
from solaris_lib.orchestration.dagspec import job_path
from solaris_lib.orchestration.sparkconf import SparkTarget, submission
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.world import Simulator

# the caller's JVM options without any archive: the "without" runs
JVM = " ".join(o for o in os.environ.get("SPARK_SUBMIT_OPTS", "").split()
               if not o.startswith(("-XX:SharedArchiveFile", "-Xlog:cds")))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def submit(data_root: Path, archive: bool, world: WorldConfig) -> tuple[float, float]:
    """(wall s, CPU s) of one spark-submit of the mine job for the world's last hour."""
    end = world.start + timedelta(days=world.days - 1, hours=12)
    settings = SolarisSettings(data_root=str(data_root))
    planned = submission(SparkTarget("local[2]"), job_path("mine_logs"),
                         ["--start", (end - timedelta(hours=1)).isoformat(),
                          "--end", end.isoformat(), "--lookback", "2d"], settings_env(settings))
    env = {**os.environ, **settings_env(settings), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_SUBMIT_OPTS": sparkcds.with_archive(JVM) if archive else JVM}
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
               "--name", "solaris-mine",
               *[arg for key, value in planned.conf.items() for arg in ("--conf", f"{key}={value}")],
               planned.application, *planned.application_args]
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"spark-submit failed: {done.stderr[-2000:]}")
    return wall, _children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind")
    args = parser.parse_args()
    if not sparkcds.ensure():
        raise SystemExit("the class archive could not be built (see the warning above)")
    world = WorldConfig(users=150, items=200, days=3, seed=11)
    runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="solaris-bench-startup-") as tmp:
        Simulator(world).run(str(Path(tmp) / "logs"))
        submit(Path(tmp), False, world)  # the page cache and Python's bytecode, warm for both
        for index in range(args.runs):
            for kind in runs:
                runs[kind].append(submit(Path(tmp), kind == "with", world))
                wall, cpu = runs[kind][-1]
                print(f"run {index + 1}/{args.runs} {kind:>7} archive: {wall:5.1f} s wall, "
                      f"{cpu:5.1f} CPU-s", flush=True)
    median = {kind: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
              for kind, r in runs.items()}
    print(json.dumps({
        "job": "mine_logs as the DAG task submits it (local[2], one hour of a 150-user world)", "jvm_options": JVM or "(default)", "runs": args.runs,
        "wall_s": {kind: round(m[0], 2) for kind, m in median.items()},
        "cpu_s": {kind: round(m[1], 2) for kind, m in median.items()},
        "ratio_wall": round(median["with"][0] / median["without"][0], 3),
        "ratio_cpu": round(median["with"][1] / median["without"][1], 3),
        "archive_mb": round(sparkcds.archive_path().stat().st_size / 1e6),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
