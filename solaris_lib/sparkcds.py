"""A class-data-sharing archive (JDK AppCDS) of the classes a Spark job loads.

A Spark JVM spends most of its start-up parsing and verifying thousands of classes from Spark's
jars; a JVM started with ``-XX:SharedArchiveFile`` maps the archived ones instead. Every job of
SOLARIS is a short JVM (a spark-submit per pipeline stage), so this is CPU taken off each one.

The archive is made once per installation (this Python environment's PySpark and the JDK it
runs on: both are in the file name) by a warm-up job run with ``-XX:ArchiveClassesAtExit``, and
used by every Spark JVM whose class path is the installation's own (local drivers and
spark-submit clients; on a standalone cluster also masters, workers and executors). A JVM with
another class path, JDK or an archive it cannot map starts as it would without one: the options
silence the JDK's notice about it, so a job's stdout stays its own.

    python -m solaris_lib.sparkcds      # build it when missing (about 30 s), print its path

``infra/services.sh`` (``make test``, ``make demo``) builds it; :func:`use` puts it into
``SPARK_SUBMIT_OPTS`` for the spark-submit calls of a process and its children.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

# the JDK's own notices about the archive (unusable, mismatched class path) go to stdout
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# JVM options for Spark drivers on a small machine running small jobs (the demo, the test suite):
# short JVMs that plan many small queries spend less CPU with the C1 compiler alone and the
# parallel collector than with tiered C2 and G1, with the same results (Java's floating point is
# strict; figures in docs/scaling.md). C1 frames are larger, hence the bigger thread stacks
# (ALS's deep lineage overflowed 1 MB), and C1 alone shrinks the code cache to 48 MB, which a
# session living for minutes outgrows (every later query fails): hence the reserve.
SMALL_MACHINE_JVM = ("-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m "
                     "-XX:+UseParallelGC -Xss16m")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java")
    if java is None or not Path(java).exists():
        raise FileNotFoundError("no java on PATH or under JAVA_HOME: Spark needs a JDK")
    return str(java)


@functools.cache
def archive_path() -> Path:
    """Where this environment's archive lives: ``<sys.prefix>/share/solaris/``, named by the
    PySpark version and a digest of the JDK's version text (another JDK gets its own)."""
    import pyspark

    version = subprocess.run([_java(), "-version"], capture_output=True, text=True,
                             timeout=60).stderr
    jdk = hashlib.sha1(version.encode()).hexdigest()[:10]
    return Path(sys.prefix) / "share" / "solaris" / f"spark-{pyspark.__version__}-jdk{jdk}.jsa"


def java_options() -> str:
    """JVM options that use the archive when it exists, else ``""`` (nothing is built; no
    JDK found also gives ``""``: Spark's own launcher then says what is missing)."""
    try:
        path = archive_path()
    except (FileNotFoundError, ImportError):
        return ""
    if any(c.isspace() for c in str(path)):  # Spark's launchers split option strings on spaces
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.exists() else ""


def with_archive(options: str) -> str:
    """``options`` (a JVM option string) plus :func:`java_options`, unless it names an
    archive already."""
    extra = "" if "-XX:SharedArchiveFile" in options else java_options()
    return f"{options} {extra}".strip()


def use() -> None:
    """Add the archive to ``SPARK_SUBMIT_OPTS``, the options of every JVM that spark-submit
    starts in this process and its children (local drivers, in-process sessions,
    cluster-mode submitters)."""
    os.environ["SPARK_SUBMIT_OPTS"] = with_archive(os.environ.get("SPARK_SUBMIT_OPTS", ""))


def ensure() -> str:
    """Build the archive when missing (one process builds, others wait on a file lock) and
    return :func:`java_options`. A failed build logs a warning and returns ``""``: Spark runs
    the same without it, only slower to start (so does a machine without a JDK or PySpark)."""
    try:
        path = archive_path()
    except (FileNotFoundError, ImportError) as exc:
        log.warning("no Spark class archive: %s", exc)
        return ""
    if path.exists():
        return java_options()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            try:
                build(path)
            except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                log.warning("Spark class archive not built (%s): JVMs start without it", exc)
    return java_options()


def build(path: Path) -> None:
    """Run the warm-up job (:func:`_warm_up`, a local spark-submit) with
    ``-XX:ArchiveClassesAtExit`` and move the archive into ``path`` whole."""
    started = time.perf_counter()
    log.info("building the Spark class archive %s (once per installation, about 30 s)", path)
    with tempfile.TemporaryDirectory(prefix=".cds-", dir=path.parent) as work:
        partial = Path(work) / "spark.jsa"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {QUIET}"}
        spark_submit = Path(sys.executable).with_name("spark-submit")
        done = subprocess.run(
            [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.shuffle.partitions=2", __file__, work],
            env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not partial.exists():
            raise RuntimeError(f"warm-up job failed ({done.returncode}): {done.stderr[-1000:]}")
        os.replace(partial, path)
    log.info("Spark class archive built in %.0f s: %s (%.0f MB)", time.perf_counter() - started,
             path, path.stat().st_size / 1e6)


def _warm_up(work: str) -> None:
    """What a SOLARIS job does, small: Parquet written by partition and read back, a join, a
    window, an aggregate, Arrow both ways and a pandas map, so that their classes are archived."""
    import pandas as pd
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = SparkSession.builder.appName("solaris-cds-warm-up").getOrCreate()
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    rows = spark.range(2000).select(
        (F.col("id") % 37).alias("user_id"), (F.col("id") % 101).alias("item_id"),
        (F.col("id") % 24).alias("hour"), F.rand(1).alias("score"),
        F.lit(b"\x00\x01").alias("embedding"))
    rows.write.mode("overwrite").partitionBy("hour").parquet(f"{work}/rows")
    read = spark.read.parquet(f"{work}/rows")
    items = spark.createDataFrame(pd.DataFrame({"item_id": range(101), "w": [0.5] * 101}))
    ranked = (read.join(F.broadcast(items), "item_id").join(read.groupBy("user_id").count(),
                                                            "user_id")
              .withColumn("rank", F.row_number().over(
                  Window.partitionBy("user_id").orderBy(F.desc("score"))))
              .where("rank <= 5"))

    def doubled(frames):
        for frame in frames:
            yield frame[["user_id", "score"]].assign(score=frame["score"] * 2)

    ranked.mapInPandas(doubled, "user_id long, score double").toPandas()
    ranked.groupBy("user_id").agg(F.collect_list("item_id"), F.sum("w")).collect()
    spark.stop()


def main(args: list[str]) -> int:
    """Build when missing and say where it is (``--quiet-when-present``: say nothing when
    it was there already)."""
    logging.basicConfig(level=logging.INFO, format="[spark-archive] %(message)s")
    try:
        present = archive_path().exists()
    except (FileNotFoundError, ImportError):
        present = False
    options = ensure()
    if not options:
        log.info("none: Spark JVMs start without one")
    elif present and "--quiet-when-present" not in args:
        log.info("%s", archive_path())
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("--"):  # the warm-up job (spark-submit)
        _warm_up(sys.argv[1])
    else:
        sys.exit(main(sys.argv[1:]))
