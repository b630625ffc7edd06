"""The transfer ratio (docs/design.md): the share of the foundation model's gain the small model keeps.

For a loss (lower is better), ``(L_plain - L_x) / (L_plain - L_fm)``. For a score where higher
is better (AUC) the same share is ``(A_x - A_plain) / (A_fm - A_plain)``, which is the identical
formula with the loss replaced by ``-AUC``. 1.0: the variant matches the FM served online; 0:
no better than the plain ranker; negative: worse than plain.

Degenerate case: when the FM is no better than the plain ranker (the denominator is <= ``eps``)
there is no gain to transfer and the ratio is undefined: ``None`` (never a division by ~0).
Any NaN input also gives ``None``.
"""

from __future__ import annotations

import math

EPS = 1e-12


def transfer_ratio(plain: float, variant: float, fm: float, *, higher_is_better: bool = False,
                   eps: float = EPS) -> float | None:
    """Share of the FM's gain over ``plain`` that ``variant`` keeps; None when undefined."""
    values = (plain, variant, fm)
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    sign = -1.0 if higher_is_better else 1.0
    gain_fm = sign * (plain - fm)
    if gain_fm <= eps:
        return None
    return sign * (plain - variant) / gain_fm


def transfer_ratios(metrics: dict[str, dict[str, float]], variant: str, *, plain: str = "plain",
                    fm: str = "fm_online") -> dict[str, float | None]:
    """``{"logloss": r, "auc": r}`` of ``variant`` from ``{name: {"logloss", "auc"}}``."""
    return {
        "logloss": transfer_ratio(metrics[plain]["logloss"], metrics[variant]["logloss"],
                                  metrics[fm]["logloss"]),
        "auc": transfer_ratio(metrics[plain]["auc"], metrics[variant]["auc"], metrics[fm]["auc"],
                              higher_is_better=True),
    }
