"""Serving metrics (coverage, waste, staleness, replayed lookups) on hand-built partitions,
compared with figures computed independently in plain Python."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.config import SolarisSettings
from solaris_lib.evaluation.serving import (
    evaluate_serving,
    read_evaluation,
    write_evaluation,
)
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, MINED, DataLayout
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition
from solaris_lib.storage import atomic_folder

pytestmark = pytest.mark.integration

PREV = Interval(datetime(2026, 3, 2, 9, tzinfo=UTC), datetime(2026, 3, 2, 10, tzinfo=UTC))
THIS = PREV.following()

# (request, minute, user, item) rows of THIS interval
ROWS = [
    ("r1", 5, 1, 10), ("r1", 5, 1, 11), ("r1", 5, 1, 12),
    ("r2", 30, 1, 10), ("r2", 30, 1, 13),
    ("r3", 45, 2, 20), ("r3", 45, 2, 21),
    ("r4", 50, 3, 30),  # user 3 is new: no history at PREV
]
PRECOMPUTED = [(1, 10), (1, 11), (1, 14), (2, 20), (2, 22), (3, 30), (4, 40)]
KNOWN_USERS = [1, 2, 4]


def write_logs(root: str) -> None:
    table = pa.table({
        "request_id": [r[0] for r in ROWS],
        "ts": [THIS.start + timedelta(minutes=r[1]) for r in ROWS],
        "user_id": [r[2] for r in ROWS], "item_id": [r[3] for r in ROWS],
        "position": [0] * len(ROWS), "clicked": [False] * len(ROWS),
    }, schema=REQUEST_LOG_SCHEMA)
    folder = f"{root}/{hour_partition(THIS.start)}"
    import os

    os.makedirs(folder)
    pq.write_table(table, f"{folder}/part-0.parquet")


def write_partitions(layout: DataLayout) -> None:
    with atomic_folder(layout.output(EMBEDDINGS, PREV)) as staging:
        pq.write_table(pa.table({
            "user_id": pa.array([p[0] for p in PRECOMPUTED], pa.int64()),
            "item_id": pa.array([p[1] for p in PRECOMPUTED], pa.int64()),
            "model_version": ["v1"] * len(PRECOMPUTED),
            "embedding": [np.ones(4, "<f2").tobytes()] * len(PRECOMPUTED),
        }), f"{staging}/part-0.parquet")
    with atomic_folder(layout.output(MINED, PREV, "user_history")) as staging:
        pq.write_table(pa.table({"user_id": pa.array(KNOWN_USERS, pa.int64())}),
                       f"{staging}/part-0.parquet")


def expected() -> dict:
    precomputed = set(PRECOMPUTED)
    hits = [(r[2], r[3]) in precomputed for r in ROWS]
    known = [r[2] in KNOWN_USERS for r in ROWS]
    requested = {(r[2], r[3]) for r in ROWS}
    return {
        "coverage": sum(hits) / len(ROWS),
        "coverage_known": sum(h for h, k in zip(hits, known, strict=True) if k) / sum(known),
        "coverage_new": sum(h for h, k in zip(hits, known, strict=True) if not k) / (len(ROWS) - sum(known)),
        "coverage_unique": len(requested & precomputed) / len(requested),
        "waste": 1 - len(requested & precomputed) / len(precomputed),
        "staleness": sorted(r[1] * 60.0 for r, h in zip(ROWS, hits, strict=True) if h),
    }


@pytest.fixture
def settings(tmp_path, redis_url, key_prefix):
    return SolarisSettings(data_root=str(tmp_path / "data"), redis_url=redis_url,
                           redis_key_prefix=key_prefix)


def test_serving_metrics_match_an_independent_count(spark, settings):
    layout = DataLayout.from_settings(settings)
    write_logs(layout.logs)
    write_partitions(layout)
    result = evaluate_serving(spark, settings, THIS, replay_requests=10)
    want = expected()
    assert result.published and result.rows == len(ROWS)
    assert result.pairs_precomputed == len(PRECOMPUTED)
    for name in ("coverage", "coverage_known", "coverage_new", "coverage_unique", "waste"):
        assert getattr(result, name) == pytest.approx(want[name]), name
    ages = want["staleness"]
    assert ages[0] <= result.staleness_p50_s <= ages[-1]
    assert result.staleness_p99_s == pytest.approx(ages[-1])
    # nothing was published to this key prefix: the replay says so instead of inventing latency
    assert result.lookup.skipped == "no version is served" and result.lookup.p50_us is None

    path = write_evaluation(layout, result, THIS)
    assert path.endswith("metrics.json")
    assert read_evaluation(layout, THIS)["coverage"] == pytest.approx(want["coverage"])
    again = evaluate_serving(spark, settings, THIS, replay_requests=0)
    assert again.coverage == result.coverage and again.waste == result.waste


def test_first_interval_has_nothing_to_score(spark, settings):
    layout = DataLayout.from_settings(settings)
    write_logs(layout.logs)
    result = evaluate_serving(spark, settings, THIS)
    assert not result.published and result.coverage is None and result.rows == len(ROWS)
    assert read_evaluation(layout, THIS) is None
