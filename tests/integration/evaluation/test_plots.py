"""Coverage-against-budget curve on hand-built pairs, checked by counting."""

from __future__ import annotations

import pytest

from solaris_lib.evaluation.plots import coverage_budget_curve, plot_coverage_curve

pytestmark = pytest.mark.integration


def test_curve_counts_rows_covered_by_each_users_top_k(spark, tmp_path):
    speculated = spark.createDataFrame(
        [(1, 10, 0.9), (1, 11, 0.5), (1, 12, 0.1), (2, 20, 0.8), (2, 21, 0.7)],
        "user_id long, item_id long, score double")
    logs = spark.createDataFrame(
        [(1, 10), (1, 10), (1, 12), (1, 99), (2, 21), (3, 30)], "user_id long, item_id long")
    curve = dict(coverage_budget_curve(speculated, logs))
    # k=1: (1,10) twice; k=2: + (2,21); k=3: + (1,12); never: (1,99), (3,30)
    assert curve[1] == pytest.approx(2 / 6)
    assert curve[2] == pytest.approx(3 / 6)
    assert curve[3] == pytest.approx(4 / 6)
    png = plot_coverage_curve(sorted(curve.items()), str(tmp_path / "c.png"), title="t")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_no_rows_gives_no_curve(spark):
    speculated = spark.createDataFrame([(1, 10, 0.9)], "user_id long, item_id long, score double")
    logs = spark.createDataFrame([], "user_id long, item_id long")
    assert coverage_budget_curve(speculated, logs) == []
