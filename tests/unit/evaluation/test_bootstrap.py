"""The paired bootstraps on constructed cases: exact zeros, known shares, user clusters."""

import numpy as np

from solaris_lib.evaluation.bootstrap import (
    gap_share,
    group_weights,
    logloss_difference,
    paired_auc_delta,
    row_logloss,
)


def test_identical_scores_differ_by_exactly_zero():
    rng = np.random.default_rng(1)
    y, s = rng.random(500) < 0.3, rng.random(500)
    out = paired_auc_delta(y, s, s.copy(), resamples=50)
    assert (out["delta"], out["low"], out["high"], out["rows"]) == (0.0, 0.0, 0.0, 500)
    users = rng.integers(0, 40, 500)
    same = logloss_difference(y, s, s.copy(), users, resamples=50)
    assert (same["value"], same["low"], same["high"]) == (0.0, 0.0, 0.0)


def test_a_better_scorer_has_an_interval_above_zero():
    rng = np.random.default_rng(2)
    y = rng.random(2000) < 0.3
    noise = rng.standard_normal(2000)
    weak, strong = y + 2.0 * noise, y + 0.5 * noise  # the same noise, less of it
    out = paired_auc_delta(y, weak, strong, resamples=100)
    assert 0 < out["low"] <= out["delta"] <= out["high"]
    back = paired_auc_delta(y, strong, weak, resamples=100)
    assert back["delta"] == -out["delta"] and back["high"] < 0
    users = rng.integers(0, 200, 2000)
    z_weak, z_strong = (np.log(0.3 / 0.7) + 0.3 * (2 * y - 1) + 0.1 * noise,
                        np.log(0.3 / 0.7) + 1.5 * (2 * y - 1) + 0.1 * noise)
    diff = logloss_difference(y, z_weak, z_strong, users, resamples=100)
    expected = row_logloss(y, z_weak).mean() - row_logloss(y, z_strong).mean()
    assert abs(diff["value"] - expected) < 1e-12 and 0 < diff["low"] <= diff["value"]


def test_one_class_gives_none():
    out = paired_auc_delta(np.zeros(10), np.arange(10), np.arange(10)[::-1])
    assert out["delta"] is None and out["rows"] == 10


def test_gap_share_of_the_references_is_zero_and_one():
    rng = np.random.default_rng(3)
    y = (rng.random(3000) < 0.2).astype(float)
    users = rng.integers(0, 300, 3000)
    low = np.full(3000, np.log(0.2 / 0.8))
    high = low + 1.2 * (2 * y - 1) + 0.3 * rng.standard_normal(3000)
    assert gap_share(y, low, low, high, users, resamples=20)["value"] == 0.0
    assert gap_share(y, low, high, high, users, resamples=20)["value"] == 1.0
    mid = 0.5 * (low + high)
    out = gap_share(y, low, mid, high, users, resamples=100)
    losses = [row_logloss(y, z).mean() for z in (low, mid, high)]
    assert abs(out["value"] - (losses[0] - losses[1]) / (losses[0] - losses[2])) < 1e-12
    assert out["low"] <= out["value"] <= out["high"] and out["resamples"] == 100
    none = gap_share(y, high, mid, low, users, resamples=20)  # "high" is worse: undefined
    assert none["value"] is None


def test_users_are_resampled_whole():
    groups = np.array([5, 5, 9, 1, 9, 9])
    weights = group_weights(groups, 50, seed=4)
    assert weights.shape == (50, 6)
    assert (weights[:, 0] == weights[:, 1]).all() and (weights[:, 2] == weights[:, 4]).all()
    per_group = weights[:, [0, 2, 3]]  # one row of each of the 3 users
    assert (per_group.sum(1) == 3).all()  # 3 users drawn per resample
