"""Which fallback tables a publish finds (checked once), the warning when only one is there,
and the driver's item tables read from parquet.

(The level as a whole is published in ``tests/integration/cache/test_fallback.py``.)
"""

import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.cache.errors import PublishInputError
from solaris_lib.cache.fallback import find_tables, read_item_clusters, read_item_priors
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout

INTERVAL = Interval.parse("2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z")


def _complete(root, table: str) -> str:
    """Mark ``embeddings/<table>/interval=20260105T100000Z`` complete; its folder."""
    folder = root / "embeddings" / table / "interval=20260105T100000Z"
    folder.mkdir(parents=True)
    (folder / "_SUCCESS").write_text("")
    return str(folder)


def test_no_tables_no_level_and_no_warning(tmp_path, caplog):
    tables = find_tables(DataLayout(str(tmp_path), str(tmp_path / "models")), INTERVAL)
    assert not tables.present and not any(tables.complete.values())
    with caplog.at_level(logging.WARNING):
        assert not tables.usable()
    assert not caplog.records


def test_one_table_only_is_skipped_with_a_warning_naming_the_missing_one(tmp_path, caplog):
    cluster = _complete(tmp_path, "cluster")
    tables = find_tables(DataLayout(str(tmp_path), str(tmp_path / "models")), INTERVAL)
    assert tables.complete == {"cluster": True, "item_clusters": False}
    assert not tables.present
    with caplog.at_level(logging.WARNING):
        assert not tables.usable()
    missing = str(tmp_path / "embeddings" / "item_clusters" / "interval=20260105T100000Z")
    assert f"{missing} is missing or incomplete" in caplog.text
    assert f"{cluster} is complete" in caplog.text


def test_both_tables_complete_are_present(tmp_path):
    _complete(tmp_path, "cluster")
    _complete(tmp_path, "item_clusters")
    tables = find_tables(DataLayout(str(tmp_path), str(tmp_path / "models")), INTERVAL)
    assert tables.present and tables.usable()
    assert tables.prior_path == str(tmp_path / "embeddings" / "item_prior"
                                    / "interval=20260105T100000Z")


def _table(folder, table: pa.Table) -> str:
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-0.parquet")
    (folder / "_SUCCESS").write_text("")
    return str(folder)


def test_item_table_sorted_with_one_cluster_per_item_and_bad_rows_counted(tmp_path):
    path = _table(tmp_path / "items", pa.table({
        "item_id": pa.array([9, 3, 3, None, -1, 5], pa.int64()),
        "cluster_id": pa.array([1, 4, 2, 0, 0, None], pa.int32())}))
    tables = read_item_clusters(path)
    assert tables.item_ids.tolist() == [3, 9] and tables.cluster_ids.tolist() == [2, 1]
    assert tables.dropped == {"bad_item_cluster": 3, "duplicate_item": 1}
    assert tables.clusters == 2


def test_a_non_finite_prior_never_displaces_a_finite_copy(tmp_path):
    nan_first = np.array([[np.nan, 0.0]], "<f2").tobytes()  # 0x7e00..: not the smaller bytes
    small_nan = np.array([[0.0, np.nan]], "<f2").tobytes()  # 0x0000 7e00: smaller than any
    good = np.array([[1.0, 2.0]], "<f2").tobytes()
    assert small_nan < good < nan_first
    path = _table(tmp_path / "priors", pa.table({
        "item_id": pa.array([5, 5, 5], pa.int64()), "model_version": pa.array(["m1"] * 3),
        "embedding": pa.array([small_nan, good, nan_first], pa.binary())}))
    tables = read_item_clusters(_table(tmp_path / "items", pa.table({
        "item_id": pa.array([1], pa.int64()), "cluster_id": pa.array([0], pa.int32())})))
    read_item_priors(tables, path, "m1", 2)
    assert tables.prior_ids.tolist() == [5]
    assert [row.tobytes() for row in tables.prior_values] == [good]
    assert tables.dropped == {"prior_non_finite": 2}


def test_item_table_of_the_wrong_types_is_refused(tmp_path):
    path = _table(tmp_path / "items", pa.table({"item_id": pa.array(["a"]),
                                                "cluster_id": pa.array([1], pa.int32())}))
    with pytest.raises(PublishInputError, match="item_id is string, expected int64"):
        read_item_clusters(path)


def test_item_priors_keep_the_smallest_copy_and_count_each_reason(tmp_path):
    half = np.array([[1.0, 2.0], [0.5, 0.5], [np.inf, 0.0]], "<f2")
    one, two, bad = (row.tobytes() for row in half)
    path = _table(tmp_path / "priors", pa.table({
        "item_id": pa.array([7, 7, 2, None, -4, 8, 9, 3], pa.int64()),
        "model_version": pa.array(["m1", "m1", "m1", "m1", "m1", "m2", "m1", "m1"]),
        "embedding": pa.array([two, one, one, one, one, one, b"\x00", bad], pa.binary())}))
    tables = read_item_clusters(_table(tmp_path / "items", pa.table({
        "item_id": pa.array([1], pa.int64()), "cluster_id": pa.array([0], pa.int32())})))
    read_item_priors(tables, path, "m1", 2)
    assert tables.prior_ids.tolist() == [2, 7]
    smaller = min(one, two)
    assert [row.tobytes() for row in tables.prior_values] == [one, smaller]
    assert tables.dropped == {"prior_null_item_id": 1, "prior_negative_item_id": 1,
                              "prior_other_model_version": 1,
                              "prior_wrong_embedding_length": 1, "prior_duplicate_item": 1,
                              "prior_non_finite": 1}
