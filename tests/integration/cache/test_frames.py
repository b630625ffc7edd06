"""The publisher's Spark SQL pieces against their numpy references, on small in-code frames."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.cache import memory
from solaris_lib.cache.frames import field_sizes
from solaris_lib.cache.pairs import non_finite_fp16
from solaris_lib.cache.validate import (
    COLUMNS,
    REASON,
    interpret,
    non_finite,
    row_problem,
    survey,
    user_groups,
)

pytestmark = pytest.mark.integration


def frame_of(spark, rows):
    schema = "user_id long, item_id long, model_version string, embedding binary"
    return spark.createDataFrame(rows, schema)


def test_item_sizes_in_sql_equal_the_numpy_model(spark):
    edges = [0, 127, 128, 4095, 4096, 32767, 32768, 8388607, 8388608, 2**31 - 1, 2**31,
             10**6 - 1, 10**6, 10**14 - 1, 10**14, 2**63 - 1]
    items = np.array(edges + list(np.random.default_rng(0).integers(0, 2**62, 200)))
    frame = spark.createDataFrame([(int(i),) for i in items], "item_id long")
    rows = frame.select("item_id", *field_sizes()).collect()
    assert [r["lp"] for r in rows] == memory.listpack_int_bytes(items).tolist()
    assert [r["ht"] for r in rows] == memory.hashtable_field_bytes(items).tolist()


def test_non_finite_regex_agrees_with_numpy(spark):
    rng = np.random.default_rng(3)
    halves = rng.integers(0, 65536, (300, 4), dtype=np.uint16)
    halves[::7, 2] = 0x7C00  # +inf in some rows
    halves[::11, 0] = 0xFE01  # a negative nan in others
    values = halves.view(np.uint8)
    frame = frame_of(spark, [(1, i, "m", values[i].tobytes()) for i in range(len(values))])
    frame = frame.orderBy("item_id")
    flags = [r["bad"] for r in frame.select(non_finite().alias("bad")).collect()]
    assert flags == non_finite_fp16(values).tolist()
    assert flags == (~np.isfinite(halves.view(np.float16)).all(axis=1)).tolist()


def test_row_problems_take_the_first_reason(spark):
    good = np.zeros(4, "<f2").tobytes()
    frame = frame_of(spark, [
        (None, -1, "m", good), (1, -1, "m", None), (1, 2, "m", None), (1, 3, "m", b"\x00"),
        (1, 4, None, good), (1, 5, "m", good),
    ])
    problems = [r[0] for r in frame.select(row_problem()).collect()]
    assert problems == ["null_user_id", "negative_item_id", "null_embedding",
                        "wrong_embedding_length", "other_model_version", None]


def test_survey_picks_the_majority_and_digests_only_publishable_rows(spark):
    four, two = np.ones(4, "<f2").tobytes(), np.ones(2, "<f2").tobytes()
    rows = [(u, i, "m1", four) for u in range(3) for i in range(4)] + [
        (9, 1, "m0", four), (9, 2, "m1", two), (9, 3, "m1", None)]
    found = survey(user_groups(frame_of(spark, rows), field_sizes()), "test")
    assert (found.model_version, found.dim, found.rows, found.valid_rows) == ("m1", 4, 15, 12)
    assert found.quarantined == {"other_model_version": 1, "wrong_embedding_length": 1,
                                 "null_embedding": 1}
    shuffled = survey(user_groups(frame_of(spark, rows[::-1]).repartition(3), field_sizes()),
                      "test")
    assert shuffled.digest == found.digest
    changed = rows[:-4] + [(2, 3, "m1", np.full(4, 2, "<f2").tobytes())] + rows[-3:]
    assert survey(user_groups(frame_of(spark, changed), field_sizes()), "t").digest != found.digest


def test_interpret_breaks_ties_by_model_version_name():
    groups = [{REASON: None, "model_version": "b", "bytes": 8, "rows": 5, "low": 1, "xor": 1},
              {REASON: None, "model_version": "a", "bytes": 8, "rows": 5, "low": 2, "xor": 2}]
    found = interpret(groups, "test")
    assert found.model_version == "a" and found.quarantined == {"other_model_version": 5}


def test_tables_written_by_pyarrow_have_the_contract_types(spark, tmp_path):
    table = pa.table({"user_id": pa.array([1], pa.int64()), "item_id": pa.array([2], pa.int64()),
                      "model_version": ["m"], "embedding": pa.array([b"\x00\x00"], pa.binary())})
    pq.write_table(table, tmp_path / "t.parquet")
    assert dict(spark.read.parquet(str(tmp_path)).dtypes) == COLUMNS


def test_survey_counts_users_not_contiguous_in_one_partition(spark):
    four = np.ones(4, "<f2").tobytes()
    rows = [(u, i, "m1", four) for u in range(3) for i in range(4)] + [(9, 1, "m0", four)]
    together = frame_of(spark, rows).coalesce(1)
    assert survey(user_groups(together, field_sizes()), "test").scattered == 0
    spread = frame_of(spark, rows).coalesce(1).repartition(3)  # round robin: runs broken up
    assert survey(user_groups(spread, field_sizes()), "test").scattered == 3
