"""The pyarrow and Spark window readers return the same validated rows and quarantine the same."""

from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.errors import LogContractError
from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window, read_window_spark
from solaris_lib.simulate.config import WorldConfig

pytestmark = pytest.mark.integration
START = WorldConfig().start


def _sorted_rows(table):
    return sorted(zip(*(table.column(c).to_pylist() for c in ("request_id", "item_id", "ts")),
                      strict=True))


def test_readers_agree_on_a_window(tiny_world, spark):
    window = Interval(START + timedelta(hours=20), START + timedelta(hours=30, minutes=30))
    arrow = read_window(str(tiny_world), window).table
    frame = read_window_spark(spark, str(tiny_world), window)
    assert frame.count() == arrow.num_rows > 0
    spark_rows = [(r.request_id, r.item_id, r.ts) for r in frame.collect()]
    assert sorted((a, b, c.replace(tzinfo=None)) for a, b, c in _sorted_rows(arrow)) == sorted(
        (a, b, c.replace(tzinfo=None)) for a, b, c in spark_rows)
    ts = arrow.column("ts").to_pylist()
    assert min(ts) >= window.start and max(ts) < window.end


def test_eval_column_only_on_request(tiny_world, spark):
    window = Interval(START, START + timedelta(hours=2))
    assert "p_click" not in read_window(str(tiny_world), window).table.column_names
    assert "p_click" in read_window(str(tiny_world), window, with_eval=True).table.column_names
    assert "p_click" in read_window_spark(spark, str(tiny_world), window, with_eval=True).columns


def test_spark_reader_quarantines_and_fails_on_contract_errors(tmp_path, spark):
    hour = START.replace(hour=3)
    folder = tmp_path / "logs" / "dt=2026-01-05" / "hour=03"
    folder.mkdir(parents=True)
    good = pa.table({
        "request_id": ["a", "a", "b"], "ts": pa.array([hour] * 3, pa.timestamp("us", tz="UTC")),
        "user_id": [1, None, 2], "item_id": [5, 6, 7],
    })
    pq.write_table(good, folder / "part-0.parquet")
    window = Interval(hour, hour + timedelta(hours=1))
    frame = read_window_spark(spark, str(tmp_path / "logs"), window)
    assert sorted(r.item_id for r in frame.collect()) == [5, 7]
    quarantine = tmp_path / "logs" / "_quarantine" / "dt=2026-01-05" / "hour=03" / "part-0.parquet"
    assert pq.read_table(quarantine).column("_reason").to_pylist() == ["null_user_id"]
    pq.write_table(good.drop_columns(["item_id"]), folder / "part-1.parquet")
    with pytest.raises(LogContractError, match="item_id"):
        read_window_spark(spark, str(tmp_path / "logs"), window)


def test_empty_window_gives_empty_frames(tmp_path, spark):
    window = Interval(START, START + timedelta(hours=1))
    assert read_window(str(tmp_path), window).table.num_rows == 0
    assert read_window_spark(spark, str(tmp_path), window).count() == 0
