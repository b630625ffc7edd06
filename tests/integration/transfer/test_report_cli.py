"""``solaris report`` end to end on the tiny world: the JSON line, the files, sane figures."""

from __future__ import annotations

import json
import math

import pytest

from solaris_lib.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

pytest.importorskip("torch")

REQUIRED = ("transfer_ratio_logloss", "transfer_ratio_logloss_ci", "transfer_ratio_note",
            "embedding_share", "fm_gain_over_plain", "transfer_ratio_auc", "coverage",
            "coverage_with_fallback", "variants", "logloss", "auc")
VARIANTS = ("plain", "distilled", "solaris", "solaris_hit_only", "solaris_embedding_only",
            "solaris_fallback", "fm_online", "fm_calibrated")


def test_report_on_the_tiny_world(spark, tiny_world, tmp_path, capsys):
    code = main(["report", "--logs", str(tiny_world), "--out", str(tmp_path), "--json",
                 "--interval", "12h", "--ranker-days", "0.5", "--test-days", "0.5",
                 "--fm-epochs", "1", "--budget-per-user", "40", "--clusters", "8",
                 "--lookback", "2d", "--scorer", "heuristic"])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    line = json.loads(last)
    for key in REQUIRED:
        assert key in line
    for variant in VARIANTS:
        assert 0 < line["logloss"][variant] < 1
        assert 0 <= line["auc"][variant] <= 1
        assert line["variants"][variant]["logloss"] == line["logloss"][variant]
        if variant != "plain":
            gain = line["variants"][variant]["gain_over_plain"]
            assert gain["low"] <= gain["value"] <= gain["high"]
    assert 0 < line["coverage"] <= line["coverage_with_fallback"] <= 1
    assert math.isclose(sum(line["coverage_by_level"].values()), 1.0, rel_tol=1e-9)
    fm_gain = line["fm_gain_over_plain"]
    if fm_gain["low"] > 0:  # a ratio with its interval, else the reason there is none
        low, high = line["transfer_ratio_logloss_ci"]
        assert low <= line["transfer_ratio_logloss"] <= high
    else:
        assert line["transfer_ratio_logloss"] is None and "not above zero" in line[
            "transfer_ratio_note"]
    assert line["transfer_ratio_auc"] is None or math.isfinite(line["transfer_ratio_auc"])
    for name in ("report.md", "report.png", "report.json"):
        assert (tmp_path / name).stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "| solaris_fallback |" in md and "coverage with fallback" in md
    full = json.loads((tmp_path / "report.json").read_text())
    assert len(full["intervals"]) == 2 and sum(f["test"] for f in full["intervals"]) == 1
    assert full["train_rows"] > 0 and full["test_rows"] > 0

    again = main(["report", "--logs", str(tiny_world), "--out", str(tmp_path), "--json",
                  "--interval", "12h", "--ranker-days", "0.5", "--test-days", "0.5",
                  "--fm-epochs", "1", "--budget-per-user", "40", "--clusters", "8",
                 "--lookback", "2d", "--scorer", "heuristic",
                  "--reuse-rows"])
    assert again == 0
    rerun = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rerun["logloss"] == line["logloss"]  # seeded: the same rows give the same figures
