"""The publisher's read path (pyarrow in Spark tasks) on messy partitions: its row hash is
Spark's xxhash64, and what reaches Redis is what the rows say, computed here by hand, however
the files are cut into slices and whichever users are shuffled."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from solaris_lib.cache import publish as publish_module
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.cache.rowhash import row_hash
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder
from tests.cachespec import bucket
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
    clusters = spark.createDataFrame([(7, 3, b"ab"), (8, 2**31 - 1, b"")],
                                     "user_id long, cluster_id int, embedding binary")
    want = [r[0] for r in clusters.select(F.xxhash64(
        "user_id", F.col("cluster_id").cast("bigint"), "embedding")).collect()]
    assert [int(row_hash(np.array([u]), np.array([c]), np.frombuffer(e, np.uint8).reshape(
        1, len(e)))[0]) for u, c, e in [(7, 3, b"ab"), (8, 2**31 - 1, b"")]] == want


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


def _write_files(settings, rows: list[tuple], files: int, group_rows: int) -> str:
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    cuts = np.linspace(0, len(rows), files + 1).astype(int)
    with atomic_folder(path) as staging:
        for index, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            table = pa.table(list(zip(*rows[a:b], strict=True)), schema=SCHEMA)
            pq.write_table(table, f"{staging}/part-{index:05d}.parquet",
                           row_group_size=group_rows)
    return path


def _expected_keys(rows: list[tuple], prefix: str, version: str, buckets: int) -> dict:
    """What Redis must hold: every published row (m1, 16 finite bytes, ids >= 0) in its
    user's bucket hash; of a pair's copies the smallest bytes."""
    keys: dict[bytes, dict[bytes, bytes]] = {}
    for user, item, model, value in rows:
        if (user is None or user < 0 or item is None or item < 0 or model != "m1"
                or value is None or len(value) != 2 * DIM
                or not np.isfinite(np.frombuffer(value, "<f2")).all()):
            continue
        key = f"{prefix}:e:{version}:{{{user}}}:{bucket(item, buckets)}".encode()
        fields = keys.setdefault(key, {})
        fields[str(item).encode()] = min(value, fields.get(str(item).encode(), value))
    return keys


def _dump(r, prefix: str, version: str) -> dict:
    return {k: r.hgetall(k) for k in sorted(r.scan_iter(f"{prefix}:e:{version}:*"))}


@pytest.mark.parametrize("files, group_rows, tasks, shuffle_all", [
    (1, 1000, 1, False), (3, 16, 4, False), (2, 7, 3, False), (2, 7, 3, True)])
def test_a_messy_partition_publishes_exactly_its_rows(spark, settings_for, redis_url,
                                                       key_prefix, monkeypatch, caplog, files,
                                                       group_rows, tasks, shuffle_all):
    settings = settings_for(redis_url)
    rows = _rows(seed=files)
    _write_files(settings, rows, files, group_rows)
    if shuffle_all:
        monkeypatch.setattr(publish_module, "SCATTERED_LIMIT", 0)
    with caplog.at_level("INFO", logger="solaris_lib.cache.inputs"):
        report = publish(spark, settings, INTERVAL, PublishConfig(partitions=tasks, buckets=4))
    expected = _expected_keys(rows, key_prefix, report.version, 4)
    assert _dump(redis.Redis.from_url(redis_url), key_prefix, report.version) == expected
    assert report.pairs == sum(len(f) for f in expected.values())
    assert report.keys == len(expected) and report.duplicates == 1
    assert report.quarantined == {
        "null_user_id": 1, "negative_user_id": 1, "null_item_id": 1, "negative_item_id": 1,
        "null_embedding": 1, "wrong_embedding_length": 3, "other_model_version": 2,
        "non_finite_embedding": 1}
    scattered = _expected_scattered(rows, files)
    assert len(scattered) >= 4
    if shuffle_all:
        assert "every row shuffled by user" in caplog.text
    else:
        assert f"{len(scattered)} scattered users' rows shuffled by user" in caplog.text


def test_contiguous_users_need_no_shuffle_whatever_the_slices(spark, settings_for, redis_url,
                                                               key_prefix, caplog):
    settings = settings_for(redis_url)
    table = embeddings_table(users=40, per_user=7, seed=3)
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet", row_group_size=10)
    with caplog.at_level("INFO", logger="solaris_lib.cache"):
        report = publish(spark, settings, INTERVAL, PublishConfig(partitions=6))
    assert (report.pairs, report.users) == (280, 40)
    assert "0 scattered users" in caplog.text and "shuffled" not in caplog.text


def test_a_dictionary_encoded_column_is_read_as_its_values(spark, settings_for, redis_url,
                                                           key_prefix):
    settings = settings_for(redis_url)
    table = embeddings_table(users=6, per_user=4, seed=9)
    column = table.schema.get_field_index("model_version")
    table = table.set_column(column, "model_version",
                             table.column("model_version").dictionary_encode())
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INTERVAL)
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-00000.parquet", use_dictionary=False)
    report = publish(spark, settings, INTERVAL, PublishConfig(partitions=2))
    assert (report.status, report.pairs, report.users) == ("published", 24, 6)
