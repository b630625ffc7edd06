"""Paired cluster bootstrap: the uncertainty of a quality figure computed on shared rows.

Every model of a comparison scores the same held-out rows; rows of one user are correlated
(one user's clicks move together), so the resampling unit is the user: each resample draws
users with replacement and weighs each row by its user's multiplicity. A figure is a function
of per-row values averaged under those weights (log-losses, their differences, ratios of
differences), so one resample costs one weighted mean per column, not a copy of the rows.
AUC is not a mean of per-row values: :func:`paired_auc_delta` resamples row indices instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from solaris_lib.evaluation.metrics import roc_auc

RESAMPLES = 200
LEVEL = 0.95


def row_logloss(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """(n,) float64 binary cross-entropy of each row, from logits (exact for large |z|)."""
    y, z = np.asarray(labels, np.float64), np.asarray(logits, np.float64)
    return np.logaddexp(0.0, z) - y * z


def group_weights(groups: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) float64 row weights: each resample draws the distinct ``groups`` (n,)
    with replacement; a row weighs as often as its group was drawn."""
    _, inverse = np.unique(groups, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if len(inverse) else 0
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n_groups, np.full(n_groups, 1.0 / max(n_groups, 1)), resamples)
    return draws[:, inverse].astype(np.float64)


def bootstrap(values: np.ndarray, groups: np.ndarray, figure: Callable[[np.ndarray], float], *,
              resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> dict:
    """``figure`` of the column means of ``values`` (n, k), and its percentile interval.

    ``figure`` maps the (k,) weighted column means to one number (None or NaN when undefined
    in a resample: such resamples are left out and counted). Returns ``value``, ``low``,
    ``high``, ``resamples`` (the defined ones) and ``rows``."""
    values = np.asarray(values, np.float64).reshape(len(groups), -1)
    value = figure(values.mean(0)) if len(values) else None
    weights = group_weights(groups, resamples, seed)
    means = weights @ values / np.maximum(weights.sum(1, keepdims=True), 1e-12)
    draws = [figure(m) for m in means]
    draws = np.array([d for d in draws if d is not None and np.isfinite(d)], np.float64)
    if value is None or not np.isfinite(value) or not len(draws):
        return {"value": None, "low": None, "high": None, "resamples": int(len(draws)),
                "rows": int(len(values))}
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return {"value": float(value), "low": float(low), "high": float(high),
            "resamples": int(len(draws)), "rows": int(len(values))}


def logloss_difference(labels: np.ndarray, base: np.ndarray, other: np.ndarray,
                       groups: np.ndarray, **options) -> dict:
    """``L(base) - L(other)`` (positive: ``other`` is better) with its interval; logits in."""
    values = np.stack([row_logloss(labels, base), row_logloss(labels, other)], 1)
    return bootstrap(values, groups, lambda m: m[0] - m[1], **options)


def gap_share(labels: np.ndarray, low: np.ndarray, model: np.ndarray, high: np.ndarray,
              groups: np.ndarray, **options) -> dict:
    """``(L_low - L_model) / (L_low - L_high)``: the share of the log-loss gap from a reference
    ``low`` to a better one ``high`` that ``model`` closes (transfer ratio, gap closed), with its
    interval; None where ``high`` is not better than ``low``."""
    values = np.stack([row_logloss(labels, z) for z in (low, model, high)], 1)

    def share(m: np.ndarray) -> float | None:
        return None if m[0] - m[2] <= 1e-12 else float((m[0] - m[1]) / (m[0] - m[2]))

    return bootstrap(values, groups, share, **options)


def paired_auc_delta(labels: np.ndarray, base: np.ndarray, other: np.ndarray, *,
                     resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> dict:
    """``AUC(other) - AUC(base)`` on the rows (n,) and its percentile bootstrap interval over
    resampled rows. Returns ``delta``, ``low``, ``high`` (None when a class is absent) and
    ``rows``."""
    y = np.asarray(labels).astype(bool)
    a, b = np.asarray(base, np.float64), np.asarray(other, np.float64)
    delta = roc_auc(y, b) - roc_auc(y, a)
    if not np.isfinite(delta):
        return {"delta": None, "low": None, "high": None, "rows": int(len(y))}
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        idx = rng.integers(0, len(y), len(y))
        d = roc_auc(y[idx], b[idx]) - roc_auc(y[idx], a[idx])
        if np.isfinite(d):
            draws.append(d)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return {"delta": float(delta), "low": float(low), "high": float(high), "rows": int(len(y))}
