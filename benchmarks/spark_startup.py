"""A pipeline stage's spark-submit bare, with the Spark class archive (``sparkcds``), and with
the archive and PySpark's zip byte-compiled (``sparkpyc``): what ``make test`` and ``make demo`` run.

The stage is the one the DAG's ``mine`` task submits, with the application, arguments and Spark
properties the task's operator gets (``sparkconf.submission`` for a ``local[2]`` connection, as
in ``make demo``) and the JVM options of the caller's ``SPARK_SUBMIT_OPTS`` (none by default,
as in a deployment), on one hour of a small simulated world: small on purpose, so that the
figure is what start-up costs. Runs alternate (bare, archive, both) so that a change in the
machine's load touches each kind. The runs without bytecode move a source-only copy of the
installation's ``pyspark.zip`` into place and the compiled one back after them (``sparkpyc``
compiles it again if the benchmark is killed in between): run no other Spark job beside it. Wall seconds and CPU seconds (the
spark-submit and all its descendants: launcher, JVM, Python driver, Python workers) per run;
``ratio_wall`` and ``ratio_cpu`` (medians): ``archive`` = archive / bare, ``bytecode`` = both /
archive, ``both`` = both / bare, below 1 when it helps. Last line: one JSON object.

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
import zipfile
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from solaris_lib import sparkcds, sparkpyc
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


def source_only(zip_path: Path, out: Path) -> None:
    """A copy of the zip ``zip_path`` without its bytecode entries, written to ``out``."""
    with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".pyc"):
                dst.writestr(info, src.read(info))


@contextmanager
def zip_in_place(zip_path: Path, replacement: Path):
    """``replacement`` as the installation's zip for the block, the zip as it was after it.
    Each swap is one rename (the path always names a whole zip) under ``sparkpyc``'s lock;
    a Spark job started elsewhere meanwhile would read the other zip: run nothing beside."""
    saved, staged = (zip_path.with_name(f".pyspark-{name}.zip") for name in ("compiled", "staged"))
    with sparkpyc.locked(zip_path):
        for leftover in (saved, staged):
            leftover.unlink(missing_ok=True)
        os.link(zip_path, saved)
        os.link(replacement, staged)
        os.replace(staged, zip_path)
        try:
            yield
        finally:
            os.replace(saved, zip_path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind")
    args = parser.parse_args()
    zip_path = sparkpyc.ensure()
    if not sparkcds.ensure() or zip_path is None:
        raise SystemExit("the class archive or the compiled zip could not be made (see above)")
    world = WorldConfig(users=150, items=200, days=3, seed=11)
    kinds = {"bare": (False, False), "archive": (True, False), "both": (True, True)}
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="solaris-bench-startup-") as tmp, \
            tempfile.TemporaryDirectory(prefix=".solaris-bench-", dir=zip_path.parent) as beside:
        sources = Path(beside) / "pyspark.zip"  # on the zip's file system: linked into place
        source_only(zip_path, sources)
        Simulator(world).run(str(Path(tmp) / "logs"))
        submit(Path(tmp), False, world)  # the page cache, warm for every kind
        for index in range(args.runs):
            for kind, (archive, bytecode) in kinds.items():
                if bytecode:
                    runs[kind].append(submit(Path(tmp), archive, world))
                else:
                    with zip_in_place(zip_path, sources):
                        runs[kind].append(submit(Path(tmp), archive, world))
                wall, cpu = runs[kind][-1]
                print(f"run {index + 1}/{args.runs} {kind:>7}: {wall:5.1f} s wall, "
                      f"{cpu:5.1f} CPU-s", flush=True)
    median = {kind: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
              for kind, r in runs.items()}
    pairs = {"archive": ("archive", "bare"), "bytecode": ("both", "archive"),
             "both": ("both", "bare")}
    print(json.dumps({
        "job": "mine_logs as the DAG task submits it (local[2], one hour of a 150-user world)",
        "jvm_options": JVM or "(default)", "runs": args.runs,
        "wall_s": {kind: round(m[0], 2) for kind, m in median.items()},
        "cpu_s": {kind: round(m[1], 2) for kind, m in median.items()},
        "ratio_wall": {name: round(median[a][0] / median[b][0], 3)
                       for name, (a, b) in pairs.items()},
        "ratio_cpu": {name: round(median[a][1] / median[b][1], 3)
                      for name, (a, b) in pairs.items()},
        "archive_mb": round(sparkcds.archive_path().stat().st_size / 1e6),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
