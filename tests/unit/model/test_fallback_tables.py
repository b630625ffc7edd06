"""An infer run that writes no fallback level removes the interval's tables of an earlier run:
the publisher serves the level whenever its tables are complete, beside any exact embeddings."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from solaris_lib.config import load_settings
from solaris_lib.intervals import Interval
from solaris_lib.layout import (
    CLUSTER_EMBEDDINGS,
    EMBEDDINGS,
    ITEM_CLUSTERS,
    ITEM_PRIORS,
    DataLayout,
)
from solaris_lib.model.fallback import embed_fallback_level

INTERVAL = Interval(datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))
TABLES = (ITEM_CLUSTERS, CLUSTER_EMBEDDINGS, ITEM_PRIORS)


def earlier_tables(settings) -> list[str]:
    layout = DataLayout.from_settings(settings)
    folders = [layout.output(EMBEDDINGS, INTERVAL, table) for table in TABLES]
    for folder in folders:
        Path(folder).mkdir(parents=True)
        (Path(folder) / "_SUCCESS").touch()
    return folders


@pytest.mark.parametrize("clusters", [0, 8])
def test_a_run_without_the_level_removes_the_tables_of_an_earlier_run(tmp_path, clusters):
    settings = load_settings(data_root=str(tmp_path), fallback_clusters=clusters)
    folders = earlier_tables(settings)
    # clusters 0: the level is turned off; 8: skipped (no mined item statistics: no Spark used)
    report = embed_fallback_level(None, settings, INTERVAL, "v1")
    assert report is None if clusters == 0 else "no complete" in report["skipped"]
    assert not any(Path(folder).exists() for folder in folders)


@pytest.mark.parametrize("clusters", [0, 8])
def test_the_infer_report_flags_a_skipped_level_as_a_metric(tmp_path, monkeypatch, clusters):
    """``fallback_skipped`` (a StatsD gauge of the infer task) is 1 when the level is on but
    was not written, 0 when it is off. (The exact embeddings' Spark run is replaced here; the
    DAG tests run it, and check the flag of a written level.)"""
    from solaris_lib.model import fallback
    from solaris_lib.model.inference import InferReport, InferRequest
    from solaris_lib.orchestration.reporting import metrics_of

    exact = InferReport(interval=INTERVAL.key, model_version="v1", output="", users=3,
                        users_without_history=0, rows_written=9, non_finite=0, seconds=0.1)
    monkeypatch.setattr("solaris_lib.model.inference.run_inference", lambda *args: exact)
    settings = load_settings(data_root=str(tmp_path), fallback_clusters=clusters)
    report = fallback.embed_interval(None, settings, InferRequest(INTERVAL))
    assert report["fallback_skipped"] is (clusters > 0)
    assert metrics_of("infer-embeddings", report) == {
        "rows_written": 9.0, "users": 3.0, "users_without_history": 0.0, "non_finite": 0.0,
        "fallback_skipped": float(clusters > 0)}
