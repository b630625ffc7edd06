"""The report's files: ``report.json``, ``report.md`` (tables) and ``report.png`` (bar charts)."""

from __future__ import annotations

import json
from pathlib import Path

ORDER = ("plain", "distilled", "solaris", "solaris_hit_only", "solaris_embedding_only",
         "solaris_fallback", "fm_online", "fm_calibrated")
COLORS = ("#888", "#c84", "#48c", "#8ac", "#46a", "#4a8", "#333", "#555")


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _interval(ci: dict | None, digits: int = 5, signed: bool = True) -> str:
    """``+0.01234 [+0.00100, +0.02000]`` from a bootstrap dict; n/a when undefined."""
    if not ci or ci.get("value") is None:
        return "n/a"
    f = f"{{:{'+' if signed else ''}.{digits}f}}"
    return f"{f.format(ci['value'])} [{f.format(ci['low'])}, {f.format(ci['high'])}]"


def transfer_table(report: dict) -> str:
    """Markdown table: log-loss, AUC, gain over plain and transfer ratio (95 % intervals)."""
    lines = ["| variant | log-loss | AUC | log-loss gain over plain [95 % CI] "
             "| transfer ratio (log-loss) [95 % CI] |", "|---|---|---|---|---|"]
    variants = report.get("variants", {})
    for name in ORDER:
        if name not in report["logloss"]:
            continue
        entry = variants.get(name, {})
        ratio = ("1 (reference)" if name == report.get("reference")
                 else _interval(entry.get("transfer_ratio"), 3, signed=False))
        if name == "plain":
            ratio = "0 (reference)"
        lines.append(f"| {name} | {_fmt(report['logloss'][name], 5)} | "
                     f"{_fmt(report['auc'][name])} | {_interval(entry.get('gain_over_plain'))} "
                     f"| {ratio} |")
    return "\n".join(lines)


def headline_line(report: dict) -> str:
    """One sentence: the transfer ratio with its interval, or why there is none."""
    if report.get("transfer_ratio_logloss") is None:
        return f"Transfer ratio (log-loss): {report.get('transfer_ratio_note') or 'n/a'}."
    low, high = report["transfer_ratio_logloss_ci"]
    share = report.get("embedding_share")
    share_ci = report.get("embedding_share_ci") or [None, None]
    return (f"Transfer ratio (log-loss, solaris against the recalibrated FM): "
            f"{report['transfer_ratio_logloss']:.3f}, 95 % interval [{low:.3f}, {high:.3f}]; "
            f"the embedding's share of that gain (hit flag alone removed): {_fmt(share, 3)} "
            f"[{_fmt(share_ci[0], 3)}, {_fmt(share_ci[1], 3)}].")


def coverage_table(report: dict) -> str:
    levels = report["coverage_by_level"]
    return "\n".join([
        "| level | share of held-out logged rows |", "|---|---|",
        *(f"| {lv} | {_fmt(levels.get(lv))} |" for lv in ("exact", "cluster", "item", "miss")),
        f"| coverage (exact) | {_fmt(report['coverage'])} |",
        f"| coverage with fallback | {_fmt(report['coverage_with_fallback'])} |",
    ])


def interval_table(report: dict) -> str:
    lines = ["| interval | period | pairs | users | scorer | logged rows | exact | cluster | item "
             "| miss |", "|---|---|---|---|---|---|---|---|---|---|"]
    for f in report["intervals"]:
        lines.append(f"| {f['interval']} | {'test' if f['test'] else 'ranker'} | {f['pairs']} | "
                     f"{f['users']} | {f['scorer']} | {f['rows']} | {f['exact']} | "
                     f"{f['cluster']} | {f.get('item', 0)} | {f['miss']} |")
    return "\n".join(lines)


def markdown(report: dict) -> str:
    exact = report["exact_hit_auc"]
    return "\n\n".join([
        "# SOLARIS transfer report",
        f"Periods: FM {report['periods']['fm']}, ranker {report['periods']['ranker']}, "
        f"held-out {report['periods']['test']}. Training rows {report['train_rows']}, held-out "
        f"rows {report['test_rows']} (CTR {_fmt(report['test_ctr'])}). FM {report['fm_version']}.",
        "## Quality on the held-out period", transfer_table(report), headline_line(report),
        "SOLARIS's log-loss gain over distillation: "
        f"{_interval(report.get('solaris_over_distilled'))} (beats it with an interval above "
        f"zero: {report['solaris_beats_distilled']}).",
        "## Coverage", coverage_table(report),
        "Misses by cause (share of held-out logged rows): " + ", ".join(
            f"{cause.replace('_', ' ')} unknown {_fmt(share)}"
            for cause, share in report.get("miss_by_cause", {}).items()) + ".",
        f"Staleness of served embeddings (minutes): p50 {_fmt(report['staleness_p50_min'], 1)}, "
        f"p99 {_fmt(report['staleness_p99_min'], 1)}.",
        "AUC on the held-out rows that had an exact hit: "
        + ", ".join(f"{n} {_fmt(exact.get(n))}" for n in ORDER if n in exact) + ".",
        _guard_line(report.get("exact_hit_auc_delta")),
        "## Intervals", interval_table(report),
    ]) + "\n"


def _guard_line(guard: dict | None) -> str:
    """The fallback's guard: AUC(solaris_fallback) - AUC(solaris) on the exact-hit rows."""
    if not guard or guard.get("delta") is None:
        return "Exact-hit AUC change with the fallback: n/a."
    return (f"Exact-hit AUC change with the fallback (solaris_fallback - solaris): "
            f"{guard['delta']:+.4f}, 95 % paired bootstrap interval [{guard['low']:+.4f}, "
            f"{guard['high']:+.4f}] over {guard['rows']} rows.")


def plot(report: dict, out: str) -> str:
    """Bars of log-loss and AUC per variant and the coverage by level (PNG)."""
    from matplotlib.figure import Figure  # the object API: the caller's backend is untouched

    fig = Figure(figsize=(15, 4.5), dpi=110)
    axes = fig.subplots(1, 3)
    names = [n for n in ORDER if n in report["logloss"]]
    for ax, key in zip(axes[:2], ("logloss", "auc"), strict=True):
        values = [report[key][n] if report[key][n] is not None else 0.0 for n in names]
        ax.bar(range(len(names)), values, color=COLORS[:len(names)])
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.5 + 1e-4
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
        ax.set_title("log-loss (lower is better)" if key == "logloss" else "AUC", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    levels = report["coverage_by_level"]
    bottom = 0.0
    for lv, color in (("exact", "#48c"), ("cluster", "#4a8"), ("item", "#ca4"), ("miss", "#ccc")):
        share = levels.get(lv) or 0.0
        axes[2].bar([0], [share], bottom=bottom, color=color, label=lv)
        bottom += share
    axes[2].set_xticks([0], ["held-out rows"])
    axes[2].set_ylim(0, 1)
    axes[2].legend(fontsize=8)
    axes[2].set_title("coverage by level", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return out


def write_outputs(report: dict, out_dir: str) -> dict[str, str]:
    """Write report.json, report.md and report.png under ``out_dir``; returns their paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(folder / "report.json"), "md": str(folder / "report.md"),
             "png": str(folder / "report.png")}
    Path(paths["json"]).write_text(json.dumps(report, indent=2, default=str))
    Path(paths["md"]).write_text(markdown(report))
    plot(report, paths["png"])
    return paths
