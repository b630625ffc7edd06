"""The learned scorer's model: a weighted logistic regression fitted in numpy on the driver.

The training candidates are a bounded hash sample (``scorer.train``'s ``max_rows``), small
enough for the driver; Newton steps on standardised features converge in a few seconds and
give the same fit whatever Spark's partitioning. Scoring needs no model transform: the fitted
model is a linear expression over the feature columns (:meth:`LinearScorer.probability`), which
Spark evaluates in generated code on every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

L2 = 1e-4  # ridge on the standardised weights, per unit of row weight (not on the intercept)


@dataclass(frozen=True)
class LinearScorer:
    """P(label) = sigmoid(intercept + sum_k weight_k * feature_k) over ``features``."""

    features: tuple[str, ...]
    weights: np.ndarray  # (k,) on the raw features
    intercept: float

    def logit(self, x: np.ndarray) -> np.ndarray:
        """(n,) log-odds of ``x`` (n, k), columns in ``features`` order."""
        return self.intercept + x @ self.weights

    def probability(self):
        """Spark Column: the probability, from the frame's feature columns."""
        from pyspark.sql import functions as F

        logit = F.lit(float(self.intercept))
        for name, weight in zip(self.features, self.weights, strict=True):
            logit = logit + F.col(name) * F.lit(float(weight))
        return (1.0 / (1.0 + F.exp(-logit))).cast("double")

    def describe(self) -> str:
        """``name=+w`` per feature (weights on the raw features), for the logs."""
        return ", ".join(f"{n}={w:+.3f}" for n, w in zip(self.features, self.weights, strict=True))


def fit(x: np.ndarray, label: np.ndarray, weight: np.ndarray, features: tuple[str, ...],
        steps: int = 25) -> LinearScorer:
    """Weighted logistic regression by Newton steps on standardised ``x`` (n, k).

    ``label``: (n,) 0/1; ``weight``: (n,) > 0 (a positive's rows). The ridge ``L2 x sum of
    weights`` keeps the Hessian invertible when a feature is constant or two are collinear."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.column_stack([np.ones(len(x)), (x - mean) / scale])
    beta = np.zeros(z.shape[1])
    ridge = L2 * weight.sum() * np.eye(z.shape[1])
    ridge[0, 0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -30, 30)))
        gradient = z.T @ (weight * (p - label)) + ridge @ beta
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z + ridge
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = beta[1:] / scale
    return LinearScorer(tuple(features), weights, float(beta[0] - np.sum(weights * mean)))
