"""Click-prediction metrics, defined once (numpy): log-loss and ROC AUC.

Every stage that reports model quality (training, the transfer report, evaluation) uses these.
"""

from __future__ import annotations

import numpy as np

_EPS = 1e-7


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function, float64."""
    x = np.asarray(logits, np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def log_loss(labels: np.ndarray, probs: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Mean binary cross-entropy (nats) of probabilities ``probs`` for 0/1 ``labels``.

    Probabilities are clipped to [1e-7, 1 - 1e-7]. NaN for empty inputs.
    """
    y = np.asarray(labels, np.float64)
    p = np.clip(np.asarray(probs, np.float64), _EPS, 1 - _EPS)
    if y.size == 0:
        return float("nan")
    losses = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    return float(np.average(losses, weights=weights))


def log_loss_from_logits(labels: np.ndarray, logits: np.ndarray) -> float:
    """:func:`log_loss` of ``sigmoid(logits)``, computed without clipping (exact for large |z|)."""
    y = np.asarray(labels, np.float64)
    z = np.asarray(logits, np.float64)
    if y.size == 0:
        return float("nan")
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a random positive outranks a random
    negative (ties count one half). NaN when only one class is present."""
    y = np.asarray(labels).astype(bool)
    s = np.asarray(scores, np.float64)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(len(s), np.float64)
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    mid = (starts + ends + 1) / 2.0  # average 1-based rank of each tie group
    ranks[order] = np.repeat(mid, ends - starts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def summary(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """``{"log_loss", "roc_auc", "pairs", "ctr"}`` of logits against 0/1 labels."""
    y = np.asarray(labels, np.float64)
    return {
        "log_loss": log_loss_from_logits(y, logits),
        "roc_auc": roc_auc(y, logits),
        "pairs": int(y.size),
        "ctr": float(y.mean()) if y.size else float("nan"),
    }
