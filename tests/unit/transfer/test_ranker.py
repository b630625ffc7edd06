"""Ranker inputs per variant, the distillation target, and that the embedding input is used."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from solaris_lib.evaluation import metrics  # noqa: E402
from solaris_lib.fallback import Level  # noqa: E402
from solaris_lib.transfer.config import RankerConfig  # noqa: E402
from solaris_lib.transfer.features import RankerRows  # noqa: E402
from solaris_lib.transfer.ranker import dense_inputs, targets, train_ranker  # noqa: E402

D = 8
EXACT, CLUSTER, ITEM, MISS = Level.EXACT, Level.CLUSTER, Level.ITEM, Level.MISS


def _rows(n: int, seed: int, hit_share: float = 0.8) -> RankerRows:
    """Clicks driven by a hidden score that only the embedding reveals (on hits)."""
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, D)).astype(np.float32)
    score = 2.0 * emb[:, 0] - 3.0
    labels = (rng.random(n) < metrics.sigmoid(score)).astype(np.float32)
    hit = rng.random(n) < hit_share
    level = np.where(hit, EXACT, rng.choice([CLUSTER, ITEM, MISS], n)).astype(np.int8)
    exact_emb = np.where(hit[:, None], emb, 0).astype(np.float32)
    fb_emb = np.where((level != MISS)[:, None], emb, 0).astype(np.float32)
    return RankerRows(
        users=rng.integers(0, 50, n), items=rng.integers(0, 80, n), labels=labels,
        ts_us=np.arange(n, dtype=np.int64) + seed * n, interval=np.zeros(n, np.int32),
        activity=rng.integers(0, 30, n).astype(np.float32),
        popularity=rng.integers(0, 300, n).astype(np.float32), fm_logit=score,
        exact_level=np.where(hit, EXACT, MISS).astype(np.int8), exact_emb=exact_emb,
        fallback_level=level, fallback_emb=fb_emb)


def test_dense_inputs_per_variant():
    rows = _rows(10, 0)
    assert dense_inputs(rows, "plain").shape == (10, 2)
    np.testing.assert_array_equal(dense_inputs(rows, "plain"), dense_inputs(rows, "distilled"))
    x = dense_inputs(rows, "solaris")
    assert x.shape == (10, 2 + D + 1)
    np.testing.assert_array_equal(x[:, -1], rows.exact_level == EXACT)
    np.testing.assert_allclose(x[:, 0], np.log1p(rows.activity), rtol=1e-6)
    fb = dense_inputs(rows, "solaris_fallback")
    assert fb.shape == (10, 2 + D + 4)
    for col, level in enumerate((EXACT, CLUSTER, ITEM, MISS)):  # the level one-hot, in order
        np.testing.assert_array_equal(fb[:, 2 + D + col], rows.fallback_level == level)
    with pytest.raises(ValueError):
        dense_inputs(rows, "nope")


def test_distilled_target_mixes_teacher_and_label():
    rows = _rows(20, 1)
    cfg = RankerConfig(distill_weight=0.25)
    expected = 0.25 * metrics.sigmoid(rows.fm_logit) + 0.75 * rows.labels
    np.testing.assert_allclose(targets(rows, "distilled", cfg), expected, rtol=1e-6)
    np.testing.assert_array_equal(targets(rows, "solaris", cfg), rows.labels)


def test_the_embedding_carries_the_signal_into_the_ranker():
    cfg = RankerConfig(epochs=3, batch=256, hidden=16)
    train, test = _rows(6000, 2), _rows(3000, 3)
    auc = {}
    for variant in ("plain", "solaris"):
        model = train_ranker(train, variant, cfg)
        auc[variant] = metrics.roc_auc(test.labels, model.predict(test))
    assert auc["plain"] < 0.6  # ids and counts are noise here
    assert auc["solaris"] > auc["plain"] + 0.1
