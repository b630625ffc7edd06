"""What every SOLARIS session is started with (``sparkutil.get_spark``), seen in a running JVM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solaris_lib.sparkutil import DEFAULT_CONF

pytestmark = [pytest.mark.integration]
ZONE = "spark.sql.session.timeZone"

JOB = """
import json, sys
from solaris_lib.sparkutil import get_spark
spark = get_spark("solaris-test-session")
print("CONF " + json.dumps({key: spark.conf.get(key) for key in sys.argv[1:]}))
spark.stop()
"""


def _compiles(spark) -> int:
    """Query classes this JVM compiled so far (Spark's codegen metrics)."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return metrics.METRIC_COMPILATION_TIME().getCount()


def test_compiled_query_code_outlives_more_distinct_queries_than_sparks_default(spark):
    """A run of the speculate stage generates ~400 distinct classes; Spark keeps 100 compiled by
    default (4 LRU segments of 25), so every repeated run compiled them all again. Here a query
    still runs compiled after 250 other distinct ones."""
    def query(k: int) -> int:
        return spark.range(8, numPartitions=1).selectExpr(f"sum(id * {k} + {k + 1}) AS s").first().s

    assert query(7) == 7 * 28 + 8 * 8
    for k in range(1000, 1250):  # each literal is generated into the code: a distinct class
        query(k)
    before = _compiles(spark)
    assert query(7) == 7 * 28 + 8 * 8
    assert _compiles(spark) == before


def test_no_python_call_sites_are_recorded_and_analysis_errors_stay_specific(spark):
    """Recording each Column call's Python call site costs ~1 ms of JVM round trips per call;
    sessions leave it off, and an analysis error still names the missing column."""
    from pyspark.errors import AnalysisException, utils
    from pyspark.sql import functions as F

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    utils._enable_debugging_cache = None  # PySpark caches the session's answer per process
    assert not utils.is_debugging_enabled()
    frame = spark.range(3).withColumn("doubled", F.col("id") * 2)
    with pytest.raises(AnalysisException, match="no_such_column"):
        frame.select(F.col("no_such_column") + 1).collect()


@pytest.mark.slow
def test_a_submitted_property_wins_over_the_sessions_default(tmp_path):
    """A job's properties come from its submission (the ``spark_default`` connection's
    ``conf``, the local master's ``sparkutil.local_conf``); :data:`DEFAULT_CONF` only fills
    what the submission left unset; the session's time zone is UTC whatever it says."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    submitted = {"spark.sql.adaptive.enabled": "false",
                 "spark.python.sql.dataFrameDebugging.enabled": "true"}
    unset = "spark.sql.codegen.cache.maxEntries"
    assert submitted.keys() <= DEFAULT_CONF.keys() and unset in DEFAULT_CONF
    assert all(DEFAULT_CONF[key] != value for key, value in submitted.items())
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[1]",
               "--conf", "spark.ui.enabled=false"]
    for key, value in {**submitted, ZONE: "America/New_York"}.items():
        command += ["--conf", f"{key}={value}"]
    done = subprocess.run([*command, str(job), *submitted, unset, ZONE], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("CONF "))
    assert json.loads(line[5:]) == {**submitted, unset: DEFAULT_CONF[unset], ZONE: "UTC"}
