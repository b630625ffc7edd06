"""benchmarks/foundation_quality.py's references on a tiny world: the floor and the oracle
equal a hand computation on the same held-out rows, and every model scores those rows."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

pytest.importorskip("torch")

from solaris_lib.simulate.config import WorldConfig  # noqa: E402
from solaris_lib.simulate.world import Simulator  # noqa: E402

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "foundation_quality.py"
_SPEC = importlib.util.spec_from_file_location("foundation_quality", _PATH)
quality = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(quality)


def _log_loss(y: np.ndarray, p: np.ndarray) -> float:
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def test_floor_and_oracle_equal_a_hand_computation(tmp_path):
    cfg = WorldConfig(users=80, items=250, days=3, seed=3)
    logs = Simulator(cfg).run(str(tmp_path / "logs")).out
    figures = quality.evaluate(logs, "test", epochs=1, seed=0)

    table = ds.dataset(logs, format="parquet", partitioning="hive").to_table(
        filter=pc.field("clicked").is_valid())
    last_day = cfg.start + timedelta(days=cfg.days - 1)
    held = table.filter(pc.field("ts") >= pc.scalar(last_day))
    train = table.filter(pc.field("ts") < pc.scalar(last_day))
    y = held["clicked"].to_numpy(zero_copy_only=False).astype(float)
    p = np.clip(held["p_click"].to_numpy(zero_copy_only=False).astype(float), 1e-7, 1 - 1e-7)
    rate = train["clicked"].to_numpy(zero_copy_only=False).mean()

    assert figures["holdout_pairs"] == len(y)
    assert figures["bayes_logloss"] == pytest.approx(_log_loss(y, p), abs=1e-5)
    assert figures["constant_logloss"] == pytest.approx(_log_loss(y, np.full_like(y, rate)),
                                                        abs=1e-5)
    for name in ("id_only", "plain", "recency_lr", "fm"):
        assert np.isfinite(figures[f"{name}_logloss"]), name
    gap = (figures["id_only_logloss"] - figures["fm_logloss"]) / (
        figures["id_only_logloss"] - figures["bayes_logloss"])
    assert figures["gap_closed_logloss"] == pytest.approx(gap, abs=2e-3)
