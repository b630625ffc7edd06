from __future__ import annotations

import itertools
import math

import numpy as np

from solaris_lib.evaluation.metrics import log_loss, log_loss_from_logits, roc_auc, sigmoid, summary


def test_auc_matches_pair_counting():
    rng = np.random.default_rng(0)
    y = rng.random(60) < 0.3
    s = np.round(rng.random(60), 1)  # many ties
    pos, neg = s[y], s[~y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    assert math.isclose(roc_auc(y, s), wins / (len(pos) * len(neg)), rel_tol=1e-12)


def test_auc_edge_cases():
    assert roc_auc([0, 1], [0.1, 0.9]) == 1.0
    assert roc_auc([1, 0], [0.1, 0.9]) == 0.0
    assert math.isnan(roc_auc([1, 1], [0.1, 0.9]))


def test_log_loss_by_hand():
    y, p = np.array([1, 0, 1]), np.array([0.9, 0.2, 0.5])
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.5)) / 3
    assert math.isclose(log_loss(y, p), expected, rel_tol=1e-12)
    z = np.log(p / (1 - p))
    assert math.isclose(log_loss_from_logits(y, z), expected, rel_tol=1e-9)
    assert np.allclose(sigmoid(z), p)
    assert math.isclose(log_loss_from_logits([1], [-800.0]), 800.0)


def test_summary_fields():
    out = summary(np.array([1, 0, 0, 0]), np.array([2.0, -1.0, 0.0, -3.0]))
    assert out["pairs"] == 4 and out["ctr"] == 0.25 and out["roc_auc"] == 1.0
