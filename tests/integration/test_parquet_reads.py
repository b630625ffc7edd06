"""``sparkutil.read_parquet``: a folder Spark wrote is read with the schema in its footer, by no
Spark job; any other folder is inferred by Spark as before; the frame is the same either way."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.sparkutil import read_parquet, written_schema

pytestmark = [pytest.mark.integration]


def _jobs_of(spark, group: str, action) -> tuple[object, int]:
    """(what ``action()`` returns, the Spark jobs it ran), counted through a job group."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        result = action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


def test_a_folder_spark_wrote_is_read_with_its_footer_schema_and_no_job(spark, tmp_path):
    from pyspark.sql import functions as F

    path = str(tmp_path / "pairs")
    frame = spark.createDataFrame(
        [(1, 10, [1.0, 2.0], "a"), (2, 11, None, None)],
        "user_id long, item_id long, factor array<float>, source string")
    ids = spark.range(2).select("id", F.array(F.lit("x")).alias("tags"))  # not nullable
    assert not ids.schema["id"].nullable and not ids.schema["tags"].dataType.containsNull
    frame.crossJoin(ids).write.parquet(path)
    read, jobs = _jobs_of(spark, "footer-read", lambda: read_parquet(spark, path))
    assert jobs == 0
    inferred, inferred_jobs = _jobs_of(spark, "inferred-read", lambda: spark.read.parquet(path))
    assert inferred_jobs >= 1  # what read_parquet saves: Spark's own inference is a job
    assert read.schema == inferred.schema  # both nullable, as Spark reads any file
    assert written_schema(path).fieldNames() == read.schema.fieldNames()
    assert sorted(read.collect()) == sorted(inferred.collect())


def test_a_folder_another_tool_wrote_is_inferred_by_spark(spark, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    pq.write_table(pa.table({"user_id": pa.array([3, 4], pa.int64()),
                             "ts": pa.array([1, 2], pa.timestamp("us", tz="UTC"))}),
                   folder / "part-0.parquet")
    assert written_schema(str(folder)) is None
    read, jobs = _jobs_of(spark, "foreign-read", lambda: read_parquet(spark, str(folder)))
    assert jobs >= 1  # Spark's own inference
    assert [(f.name, f.dataType.simpleString()) for f in read.schema] == [
        ("user_id", "bigint"), ("ts", "timestamp")]
    assert sorted(r.user_id for r in read.collect()) == [3, 4]


def test_a_single_file_is_read_with_its_footer_schema(spark, tmp_path):
    path = tmp_path / "one"
    spark.range(3).coalesce(1).write.parquet(str(path))
    [part] = path.glob("part-*.parquet")
    assert written_schema(str(part)) is not None
    assert sorted(r.id for r in read_parquet(spark, str(part)).collect()) == [0, 1, 2]
