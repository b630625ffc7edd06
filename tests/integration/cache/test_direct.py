"""The direct read path (pyarrow in Spark tasks) against the JVM path (Spark SQL): the same
hash, survey, memory estimate, version id and bytes in Redis, on a messy partition."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from solaris_lib.cache.errors import PublishInputError
from solaris_lib.cache.inputs import DirectInput, SparkInput
from solaris_lib.cache.memory import HashLimits
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.cache.rowhash import row_hash
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder
from tests.integration.cache.conftest import INTERVAL, embeddings_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DIM = 8
SCHEMA = pa.schema([("user_id", pa.int64()), ("item_id", pa.int64()),
                    ("model_version", pa.string()), ("embedding", pa.binary())])


def test_row_hash_equals_spark_xxhash64_on_random_rows(spark):
    from pyspark.sql import functions as F

    rng = np.random.default_rng(11)
    edges = [0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, -2**63]
    rows = []
    for width in (0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 127, 128, 200):
        for k in range(12):
            user = edges[k] if k < len(edges) else int(rng.integers(-2**63, 2**63 - 1))
            item = edges[-1 - k] if k < len(edges) else int(rng.integers(0, 2**63 - 1))
            rows.append((user, item, rng.integers(0, 256, width, dtype=np.uint8).tobytes()))
    rows.append((5, 6, b"\xff" * 64))
    frame = spark.createDataFrame(rows, "user_id long, item_id long, embedding binary")
    want = [r[0] for r in frame.select(F.xxhash64("user_id", "item_id", "embedding"))
            .collect()]
    got = [int(row_hash(np.array([u]), np.array([i]),
                        np.frombuffer(e, np.uint8).reshape(1, len(e)))[0]) for u, i, e in rows]
    assert got == want


def _rows(seed: int) -> list[tuple]:
    """Users 0-29, 3-12 items each, then every kind of bad row, duplicates and runs apart."""
    rng = np.random.default_rng(seed)
    good = lambda: rng.standard_normal(DIM).astype("<f2").tobytes()  # noqa: E731
    rows = [(u, int(i), "m1", good()) for u in range(30)
            for i in rng.choice(10**9, int(rng.integers(3, 13)), replace=False)]
    nan = np.array([np.nan] + [0.0] * (DIM - 1), "<f2").tobytes()
    bad = [(None, 1, "m1", good()), (-3, 1, "m1", good()), (4, None, "m1", good()),
           (4, -7, "m1", good()), (4, 9, "m1", None), (4, 10, "m1", good()[:-2]),
           (4, 11, "m1", good()[:3]), (4, 12, "m1", b""), (4, 13, None, good()),
           (4, 14, "m0", good()), (6, 15, "m1", nan), (7, 10**12, "m1", good())]
    rows[20:20] = bad  # inside user 2's or 3's run: that user is no longer one run
    rows += [(3, 777, "m1", good()), (3, 777, "m1", good())]  # a duplicate, apart from user 3
    rows += [(40, 5, "m1", good()), (41, 5, "m1", good()), (40, 6, "m1", good())]
    return rows


def _write_files(settings, rows: list[tuple], files: int, group_rows: int) -> str:
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    cuts = np.linspace(0, len(rows), files + 1).astype(int)
    with atomic_folder(path) as staging:
        for index, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            table = pa.table(list(zip(*rows[a:b], strict=True)), schema=SCHEMA)
            pq.write_table(table, f"{staging}/part-{index:05d}.parquet",
                           row_group_size=group_rows)
    return path


def _expected_scattered(rows: list[tuple], files: int) -> list[int]:
    """Published (user, m1, 16 bytes) users whose rows are not consecutive in one file."""
    cuts = np.linspace(0, len(rows), files + 1).astype(int)
    where: dict[int, list[tuple[int, int]]] = {}
    for index, (user, item, version, value) in enumerate(rows):
        if (user is not None and user >= 0 and item is not None and item >= 0
                and version == "m1" and value is not None and len(value) == 2 * DIM):
            file = int(np.searchsorted(cuts, index, side="right") - 1)
            where.setdefault(user, []).append((file, index))
    return sorted(user for user, at in where.items()
                  if len({f for f, _ in at}) > 1 or at[-1][1] - at[0][1] + 1 != len(at))


@pytest.mark.parametrize("files, group_rows, tasks", [(1, 1000, 1), (3, 16, 4), (2, 7, 3)])
def test_direct_survey_equals_the_spark_survey(spark, settings_for, redis_url, files,
                                               group_rows, tasks):
    rows = _rows(seed=files)
    source = _write_files(settings_for(redis_url), rows, files, group_rows)
    limits = HashLimits(16, 64, "test")  # users with more pairs than 16: hashtables
    jvm, jvm_slots = SparkInput(spark, source).survey(2, 40, limits)
    direct_input = DirectInput(spark, source, tasks)
    found, slots = direct_input.survey(2, 40, limits)
    assert dataclasses.replace(found, scattered=0) == dataclasses.replace(jvm, scattered=0)
    assert set(found.quarantined) == {"null_user_id", "negative_user_id", "null_item_id",
                                      "negative_item_id", "null_embedding",
                                      "wrong_embedding_length", "other_model_version"}
    assert found.valid_rows == found.rows - 10
    assert sorted(slots, key=lambda r: r["slot"]) == sorted(jvm_slots, key=lambda r: r["slot"])
    expected = _expected_scattered(rows, files)
    assert found.scattered == len(expected) >= 4
    assert direct_input.scattered(found, 1000) == expected
    assert direct_input.scattered(found, len(expected) - 1) is None


def _dump(r, prefix: str, version: str) -> dict:
    return {k: r.hgetall(k) for k in sorted(r.scan_iter(f"{prefix}:e:{version}:*"))}


def test_direct_and_spark_publish_the_same_version_and_bytes(spark, settings_for, redis_url,
                                                             key_prefix):
    settings = settings_for(redis_url)
    rows = _rows(seed=5)
    _write_files(settings, rows, files=3, group_rows=9)
    r = redis.Redis.from_url(redis_url)
    reports, dumps = [], []
    for direct in (True, False):
        for key in r.scan_iter(f"{key_prefix}:*"):
            r.delete(key)
        reports.append(publish(spark, settings, INTERVAL,
                               PublishConfig(direct_read=direct, partitions=3)))
        dumps.append(_dump(r, key_prefix, reports[-1].version))
    fields = ("status", "version", "pairs", "users", "duplicates", "quarantined",
              "estimate_bytes", "listpack_users", "rows_read")
    direct_report, spark_report = ({f: getattr(rep, f) for f in fields} for rep in reports)
    assert direct_report == spark_report
    # the first publish did read directly (a silent fall-back would compare Spark with Spark)
    assert "survey_task_max" in reports[0].seconds
    assert "survey_task_max" not in reports[1].seconds
    assert reports[0].duplicates == 1 and reports[0].quarantined["non_finite_embedding"] == 1
    assert dumps[0] == dumps[1] and len(dumps[0]) == 32


def test_contiguous_users_need_no_shuffle_whatever_the_slices(spark, settings_for, redis_url,
                                                               key_prefix, caplog):
    settings = settings_for(redis_url)
    table = embeddings_table(users=40, per_user=7, seed=3)
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet", row_group_size=10)
    with caplog.at_level("INFO", logger="solaris_lib.cache.publish"):
        report = publish(spark, settings, INTERVAL, PublishConfig(partitions=6))
    assert (report.pairs, report.users) == (280, 40)
    assert "input order kept, 0 scattered users shuffled" in caplog.text
    found, _ = DirectInput(spark, path, 6).survey(1, 30, HashLimits())
    assert found.scattered == 0


def test_a_dictionary_encoded_column_is_read_by_spark_sql(spark, settings_for, redis_url,
                                                          key_prefix, caplog):
    settings = settings_for(redis_url)
    table = embeddings_table(users=6, per_user=4, seed=9)
    column = table.schema.get_field_index("model_version")
    table = table.set_column(column, "model_version",
                             table.column("model_version").dictionary_encode())
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet", use_dictionary=False)
    with pytest.raises(PublishInputError, match="model_version"):
        DirectInput(spark, path, 2)
    with caplog.at_level("INFO", logger="solaris_lib.cache.publish"):
        report = publish(spark, settings, INTERVAL, PublishConfig(partitions=2))
    assert (report.status, report.pairs, report.users) == ("published", 24, 6)
    assert "Spark SQL reads it" in caplog.text
