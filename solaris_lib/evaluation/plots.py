"""Coverage against budget: how many of the next interval's rows the top-k speculated pairs per
user would have covered, for k from 1 to the largest list, and its PNG."""

from __future__ import annotations

import numpy as np


def coverage_budget_curve(speculated, logs) -> list[tuple[int, float]]:
    """``[(k, coverage)]``: request-weighted coverage of ``logs`` rows by each user's top-k
    speculated pairs (by ``score``, ties by item id). Spark DataFrames in, a short list out."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ranked = speculated.select("user_id", "item_id", F.row_number().over(
        Window.partitionBy("user_id").orderBy(F.desc("score"), "item_id")).alias("rank"))
    rows = logs.select("user_id", "item_id").join(ranked, ["user_id", "item_id"], "left")
    counts = {int(r["rank"] or 0): int(r["n"])
              for r in rows.groupBy("rank").agg(F.count("*").alias("n")).collect()}
    total = sum(counts.values())
    if total == 0 or len(counts) <= 1 and 0 in counts:
        return []
    top = max(counts)
    hits = np.zeros(top + 1, dtype=np.int64)
    for rank, n in counts.items():
        if rank > 0:
            hits[rank] = n
    cumulative = np.cumsum(hits)
    budgets = sorted({int(k) for k in np.unique(np.geomspace(1, top, num=24).round())} | {top})
    return [(k, float(cumulative[k]) / total) for k in budgets]


def plot_coverage_curve(curve: list[tuple[int, float]], out: str, *, title: str,
                        baselines: dict[str, list[tuple[int, float]]] | None = None) -> str:
    """Write coverage against the per-user budget (log x axis) as a PNG; returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ax.plot([k for k, _ in curve], [c for _, c in curve], marker="o", ms=3, label="SOLARIS")
    for name, points in (baselines or {}).items():
        ax.plot([k for k, _ in points], [c for _, c in points], ls="--", label=name)
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("pairs precomputed per user (top-k by speculation score)")
    ax.set_ylabel("coverage of next interval's rows")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
