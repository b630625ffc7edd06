"""The Spark class archive (sparkcds.py) and PySpark's compiled zip (sparkpyc.py) with a real
spark-submit: a local job maps Spark's classes from the archive and its Python driver and worker
load PySpark's bytecode from the zip; a JVM that cannot use the archive starts as usual, its
stdout its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from solaris_lib import sparkcds, sparkpyc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print(spark.range(100).selectExpr("id % 7 AS k").groupBy("k").count().count())
import pyspark.sql.functions
worker = spark.sparkContext.parallelize([0], 1).map(
    lambda _: __import__("sys").modules["pyspark.worker"].__file__).collect()[0]
print(pyspark.sql.functions.__file__, worker)
spark.stop()
"""


def _submit(tmp_path: Path, options: str) -> subprocess.CompletedProcess:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "SPARK_SUBMIT_OPTS": options, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([str(Path(sys.executable).with_name("spark-submit")), "--master",
                           "local[1]", "--conf", "spark.ui.enabled=false", str(job)],
                          env=env, capture_output=True, text=True, timeout=300)


def test_a_local_job_maps_sparks_classes_from_the_archive_and_loads_pyspark_bytecode(tmp_path):
    options = sparkcds.ensure()  # infra/services.sh built it; else it is built here
    assert options, "the archive could not be built"
    zip_path = sparkpyc.ensure()  # likewise
    assert zip_path is not None, "the PySpark zip could not be compiled"
    loads = tmp_path / "classes.txt"
    done = _submit(tmp_path, f"{options} -Xlog:class+load=info:file={loads}")
    assert done.returncode == 0, done.stderr[-2000:]
    count, modules = done.stdout.strip().split("\n")
    assert count == "7"
    driver, worker = modules.split()  # spark-submit put the zip first on both paths
    assert driver == f"{zip_path}/pyspark/sql/functions/__init__.pyc"
    assert worker == f"{zip_path}/pyspark/worker.pyc"
    archived = [line for line in loads.read_text().splitlines()
                if "org.apache.spark." in line and "shared objects file (top)" in line]
    assert len(archived) > 2000  # SparkContext, SQL, Arrow: the warm-up job's classes


def test_a_jvm_the_archive_was_not_made_for_starts_without_a_word_on_stdout():
    """A JVM with another class path (here none) cannot map the archive; the JDK would say so
    on stdout, where a job prints its result, unless told not to (``QUIET``)."""
    options = sparkcds.ensure()
    assert options
    java = [sparkcds._java(), f"-XX:SharedArchiveFile={sparkcds.archive_path()}"]
    loud = subprocess.run([*java, "-version"], capture_output=True, text=True, timeout=60)
    assert "shared archive" in loud.stdout  # what the options keep off a job's stdout
    quiet = subprocess.run([*java, *sparkcds.QUIET.split(), "-version"], capture_output=True,
                           text=True, timeout=60)
    assert quiet.returncode == 0 and quiet.stdout == "" and "version" in quiet.stderr
