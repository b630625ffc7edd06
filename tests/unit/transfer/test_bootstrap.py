"""The paired AUC-difference bootstrap on constructed cases."""

import numpy as np

from solaris_lib.transfer.bootstrap import paired_auc_delta


def test_identical_scores_differ_by_exactly_zero():
    rng = np.random.default_rng(1)
    y, s = rng.random(500) < 0.3, rng.random(500)
    out = paired_auc_delta(y, s, s.copy(), resamples=50)
    assert (out["delta"], out["low"], out["high"], out["rows"]) == (0.0, 0.0, 0.0, 500)


def test_a_better_scorer_has_an_interval_above_zero():
    rng = np.random.default_rng(2)
    y = rng.random(2000) < 0.3
    noise = rng.standard_normal(2000)
    weak, strong = y + 2.0 * noise, y + 0.5 * noise  # the same noise, less of it
    out = paired_auc_delta(y, weak, strong, resamples=100)
    assert 0 < out["low"] <= out["delta"] <= out["high"]
    back = paired_auc_delta(y, strong, weak, resamples=100)
    assert back["delta"] == -out["delta"] and back["high"] < 0


def test_one_class_gives_none():
    out = paired_auc_delta(np.zeros(10), np.arange(10), np.arange(10)[::-1])
    assert out["delta"] is None and out["rows"] == 10
