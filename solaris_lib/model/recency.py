"""The recency baseline: logistic regression on the user's time-decayed click counts (numpy).

The cheapest feature a click model gets from the logs, and no ids: per labelled pair,
``log1p`` of the user's clicks before the request weighted ``2 ** (-age / h)`` for each
half-life ``h`` of :data:`HALF_LIVES_S`, and of the user's events over one day. A foundation
model worth serving must beat it clearly; if it does not, its sequence reading adds nothing a
counter could not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solaris_lib.model.examples import Examples, decayed_counts

HALF_LIVES_S = (3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0)
EVENTS_HALF_LIFE_S = 86400.0


def recency_features(examples: Examples) -> np.ndarray:
    """(pairs, F) float64 features of every labelled pair, in ``t_labels`` order."""
    ev = examples.events
    per_request = [decayed_counts(ev, examples.user, examples.ts_us, h, clicks_only=True)
                   for h in HALF_LIVES_S]
    per_request.append(decayed_counts(ev, examples.user, examples.ts_us, EVENTS_HALF_LIFE_S,
                                      clicks_only=False))
    counts = np.diff(examples.t_offsets)
    return np.log1p(np.repeat(np.stack(per_request, axis=1), counts, axis=0))


@dataclass(frozen=True)
class LogisticModel:
    """``logit = x @ w + b`` with the features standardised by ``mean``/``std``."""

    w: np.ndarray
    b: float
    mean: np.ndarray
    std: np.ndarray

    def logits(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std) @ self.w + self.b


def fit_logistic(x: np.ndarray, y: np.ndarray, *, ridge: float = 1e-4,
                 iterations: int = 50) -> LogisticModel:
    """Newton's method (IRLS) on the mean log-loss plus ``ridge/2 |w|^2`` (bias unpenalised).

    ``x`` (n, F) float64, ``y`` (n,) 0/1. Converges in a handful of steps for a few features.
    """
    mean, std = x.mean(0), x.std(0) + 1e-9
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], ridge)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ beta)))
        grad = z.T @ (p - y) / len(y) + penalty * beta
        hess = (z * (p * (1 - p))[:, None]).T @ z / len(y) + np.diag(penalty + 1e-12)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-9:
            break
    return LogisticModel(beta[:-1], float(beta[-1]), mean, std)


def recency_baseline(train: Examples, held: Examples) -> np.ndarray:
    """(held pairs,) float64 logits of the recency model fitted on ``train``'s pairs."""
    model = fit_logistic(recency_features(train), train.t_labels.astype(np.float64))
    return model.logits(recency_features(held))
