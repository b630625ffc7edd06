"""What every SOLARIS session is started with (``sparkutil.get_spark``), seen in a running JVM."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration]


def _compiles(spark) -> int:
    """Query classes this JVM compiled so far (Spark's codegen metrics)."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return metrics.METRIC_COMPILATION_TIME().getCount()


def test_compiled_query_code_outlives_more_distinct_queries_than_sparks_default(spark):
    """A run of the speculate stage generates ~400 distinct classes; Spark keeps 100 compiled by
    default, so every repeated run compiled them all again. Here a query still runs compiled
    after 150 other distinct ones."""
    def query(k: int) -> int:
        return spark.range(8, numPartitions=1).selectExpr(f"sum(id * {k} + {k + 1}) AS s").first().s

    assert query(7) == 7 * 28 + 8 * 8
    for k in range(1000, 1150):  # each literal is generated into the code: a distinct class
        query(k)
    before = _compiles(spark)
    assert query(7) == 7 * 28 + 8 * 8
    assert _compiles(spark) == before


def test_no_python_call_sites_are_recorded_and_analysis_errors_stay_specific(spark):
    """Recording each Column call's Python call site costs ~1 ms of JVM round trips per call;
    sessions leave it off, and an analysis error still names the missing column."""
    from pyspark.errors import AnalysisException
    from pyspark.errors.utils import is_debugging_enabled
    from pyspark.sql import functions as F

    assert not is_debugging_enabled()
    frame = spark.range(3).withColumn("doubled", F.col("id") * 2)
    with pytest.raises(AnalysisException, match="no_such_column"):
        frame.select(F.col("no_such_column") + 1).collect()
