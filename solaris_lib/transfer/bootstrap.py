"""Paired bootstrap of an AUC difference: is a change on the same rows more than noise?

Used for the hierarchical fallback's guard "no lower AUC on the rows that had an exact hit":
both variants score the same held-out rows, so the rows are resampled together and the
difference is recomputed per resample.
"""

from __future__ import annotations

import numpy as np

from solaris_lib.model.metrics import roc_auc


def paired_auc_delta(labels: np.ndarray, base: np.ndarray, other: np.ndarray, *,
                     resamples: int = 200, seed: int = 0, level: float = 0.95) -> dict:
    """``AUC(other) - AUC(base)`` on the rows (n,) and its percentile bootstrap interval.

    ``labels`` (n,) 0/1; ``base``/``other`` (n,) scores of the same rows. Returns ``delta``,
    ``low``, ``high`` (None when a class is absent) and ``rows``."""
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
