"""Rows delivered twice, in two files of one hour, are read once by the Spark reader too (the
files of an hour are validated together on one executor); the repeats are quarantined."""

from datetime import timedelta

import pyarrow.parquet as pq
import pytest

from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import contract_errors_from_executors, read_window_spark
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA
from tests.unit.logs.test_validate import HOUR, rows, write

pytestmark = pytest.mark.integration


def test_the_spark_reader_keeps_one_copy_of_rows_repeated_across_files(spark, tmp_path):
    write(tmp_path, rows(10), REQUEST_LOG_SCHEMA, name="part-0.parquet")
    write(tmp_path, rows(6, start=6), REQUEST_LOG_SCHEMA, name="part-1.parquet")
    frame = read_window_spark(spark, str(tmp_path), Interval(HOUR, HOUR + timedelta(hours=1)),
                              quarantine_root=str(tmp_path / "_q"))
    with contract_errors_from_executors():
        got = sorted((r.request_id, r.item_id) for r in frame.collect())
    assert got == sorted({(f"r{i // 5}", i) for i in range(12)})
    quarantined = pq.read_table(tmp_path / "_q" / "dt=2026-01-05" / "hour=10" / "part-1.parquet")
    assert sorted(quarantined["item_id"].to_pylist()) == [6, 7, 8, 9]
