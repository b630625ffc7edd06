"""The product's weighted logistic fit (solaris_lib.speculation.logistic, scorer.fit_rows), which
benchmarks/scorer_replay.py replays, and that benchmark's numpy pieces: the selection, the
in-sample folds and the MLP."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "scorer_replay.py"
_SPEC = importlib.util.spec_from_file_location("scorer_replay", _PATH)
replay = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(replay)


def test_fit_recovers_the_coefficients_of_logistic_data():
    from solaris_lib.speculation.logistic import fit

    rng = np.random.default_rng(3)
    x = rng.normal(size=(40_000, 2)) * [1.0, 3.0] + [0.0, 5.0]
    logit = -1.0 + 2.0 * x[:, 0] - 0.5 * x[:, 1]
    label = (rng.random(len(x)) < 1 / (1 + np.exp(-logit))).astype(float)
    model = fit(x, label, np.ones(len(x)), ("a", "b"))
    assert model.weights == pytest.approx([2.0, -0.5], abs=0.06)
    assert model.intercept == pytest.approx(-1.0, abs=0.1)
    assert model.logit(x) == pytest.approx(logit, abs=0.4)


def test_a_positive_weighs_its_rows_as_repeated_positives():
    from solaris_lib.speculation.scorer import fit_rows

    x = np.array([[0.0], [1.0], [1.0], [0.0]])
    weighted = fit_rows(x, np.array([0.0, 3.0, 0.0, 1.0]), ("x",))
    repeated = fit_rows(np.vstack([x, [[1.0], [1.0]]]), np.array([0.0, 1.0, 0.0, 1.0, 1.0, 1.0]),
                        ("x",))
    at_one = np.array([[1.0]])
    assert weighted.logit(at_one) == pytest.approx(repeated.logit(at_one), abs=1e-3)
    assert weighted.logit(at_one)[0] > weighted.logit(np.array([[0.0]]))[0] + 0.5  # 3:1 vs 1:1


def test_per_user_and_global_selection():
    # user 1 has three strong pairs, user 2 one weak and one strong; 10 future rows in all
    candidates = pd.DataFrame({
        "user_id": [1, 1, 1, 2, 2], "item_id": [5, 6, 7, 5, 6],
        "rows": [3.0, 2.0, 1.0, 0.0, 2.0]})
    score = np.array([0.9, 0.8, 0.7, 0.1, 0.6])
    budgets = {"budget_per_user": 1, "global_budget": None, "denominator": 10.0}
    got = replay.coverage(candidates, score, budgets, cap=4)
    assert got["per_user"] == pytest.approx(0.5)  # user 1 item 5 (3) + user 2 item 6 (2)
    # global: 2 pairs in total, one user at most 4: both of user 1's best
    assert got["global"] == pytest.approx(0.5)  # 3 + 2
    budgets["global_budget"] = 4
    assert replay.coverage(candidates, score, budgets, cap=4)["global"] == pytest.approx(0.8)
    assert replay.coverage(candidates, score, budgets, cap=2)["global"] == pytest.approx(0.7)


def test_in_sample_scores_each_half_of_the_users_by_a_fit_on_the_other():
    users = np.arange(40)
    half = pd.util.hash_array(users) % 2
    assert 0 < half.sum() < len(users)
    candidates = pd.DataFrame({"user_id": users, "rows": np.where(half == 0, 10.0, 0.0)})

    def mean_rows(x_fit, rows, x_apply):  # a learner that predicts its fit set's mean
        return np.full(len(x_apply), rows.mean())

    score = replay.in_sample(mean_rows, candidates, np.zeros((len(users), 1)))
    assert np.all(score[half == 0] == 0.0) and np.all(score[half == 1] == 10.0)


def test_mlp_ranks_by_a_curved_poisson_rate():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6000, 2))
    log_rate = 0.5 + x[:, 0] - x[:, 1] ** 2  # not monotone in x1: a linear model cannot rank it
    rows = rng.poisson(np.exp(log_rate)).astype(float)
    test = rng.normal(size=(2000, 2))
    truth = 0.5 + test[:, 0] - test[:, 1] ** 2
    ranks = lambda v: pd.Series(v).rank().to_numpy()  # noqa: E731
    mlp = np.corrcoef(ranks(replay.mlp_scores(x, rows, test, epochs=40)), ranks(truth))[0, 1]
    linear = np.corrcoef(ranks(replay.logistic_scores(x, rows, test)), ranks(truth))[0, 1]
    assert mlp > 0.95 and linear < 0.8
