"""Offline evaluation of speculation on any contract logs: history before a cutoff, future after.

Runs the real stage functions (mine, ALS retrieval, candidates, scorer, budgets) on
``[cutoff - lookback, cutoff)`` and scores the chosen pairs against ``[cutoff, cutoff + horizon)``
with :func:`solaris_lib.evaluation.speculation.coverage_metrics`, beside single-source baselines
(repeat only, popularity only, FAISS only) at the same budget in the same run.

The scorer is trained the way the pipeline trains it, on an earlier split whose labels are
known before the cutoff: features as of ``t = max(cutoff - horizon, midpoint of the history)``
from ``[t - lookback, t)``, labels from ``[t, cutoff)``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from solaris_lib.errors import ConfigError
from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.progress import step
from solaris_lib.sparkutil import collect_garbage
from solaris_lib.speculation.candidates import faiss_feature
from solaris_lib.speculation.config import (
    SOURCES,
    MineConfig,
    RetrievalConfig,
    SpeculateConfig,
    retrieval_config,
    speculate_config,
)
from solaris_lib.speculation.jobargs import ALS_FIELDS
from solaris_lib.speculation.pipeline import mined_in_memory, speculate_frames

log = logging.getLogger(__name__)

_MIN_TRAIN_HISTORY = timedelta(hours=1)
ALLOCATIONS = ("per-user", "global")
GLOBAL_USER_CAP = 4  # with --allocation global, one user keeps at most this x the budget
EVAL_STAGES = 7  # the progress steps of one evaluation (solaris_lib.progress)


@dataclass(frozen=True)
class EvalRequest:
    logs: str
    cutoff: datetime
    horizon: timedelta
    lookback: timedelta
    budget_per_user: int | None = None
    budget_factor: float | None = None
    global_budget: int | None = None
    scorer: str = "auto"
    out: str | None = None
    allocation: str = "per-user"
    faiss_k: int = 0  # FAISS pool depth per user; 0: the budget
    live: dict = field(default_factory=dict)  # live-item fields of SpeculateConfig (jobargs)
    dump: str | None = None  # folder for the scorer's inputs and the future rows (scorer_replay)
    retrieval_fields: dict = field(default_factory=dict)  # RetrievalConfig fields given (jobargs)
    sources: tuple[str, ...] = SOURCES  # candidate sources of the run

    def retrieval(self) -> RetrievalConfig:
        """The run's ALS and choice-model settings: the config's defaults with
        ``retrieval_fields`` over them."""
        return retrieval_config(lookback=self.lookback, **self.retrieval_fields)

    def speculate(self) -> SpeculateConfig:
        """The speculate settings given (sources, scorer, live items), before the budget."""
        return speculate_config(sources=self.sources, scorer=self.scorer, **self.live)

    def __post_init__(self) -> None:
        if (self.budget_per_user is None) == (self.budget_factor is None):
            raise ConfigError("give exactly one of --budget-per-user and --budget-factor")
        if self.allocation not in ALLOCATIONS:
            raise ConfigError(f"--allocation must be one of {', '.join(ALLOCATIONS)}")
        if self.faiss_k < 0:
            raise ConfigError("--faiss-k must be 0 (the budget) or a positive count")
        self.speculate()  # a bad live knob or source fails here, before any Spark work
        self.retrieval()  # and so does a bad ALS knob
        if self.allocation == "global" and self.global_budget is not None:
            raise ConfigError("--allocation global sets the global budget itself (the budget "
                              "per user x the known users): do not also give --global-budget")


def _first_ts(logs) -> datetime | None:
    """Earliest row time of ``logs`` (UTC), None when empty."""
    from pyspark.sql import functions as F

    value = logs.agg(F.min(F.col("ts").cast("double"))).first()[0]
    return None if value is None else datetime.fromtimestamp(value, tz=UTC)


def training_split(first: datetime | None, cutoff: datetime, horizon: timedelta) -> datetime | None:
    """Feature time of the scorer's training split, or None when the history is too short."""
    if first is None:
        return None
    split = max(cutoff - horizon, first + (cutoff - first) / 2)
    return split if split - first >= _MIN_TRAIN_HISTORY else None


def _window(spark, logs_root: str, start: datetime, end: datetime):
    return read_window_spark(spark, logs_root, Interval(start, end))


def train_inputs(spark, request: EvalRequest, history, mine_cfg: MineConfig,
                 retrieval_cfg: RetrievalConfig):
    """(Mined as of the split, label rows) for the scorer, or None without a usable split."""
    from pyspark.sql import functions as F

    from solaris_lib.speculation.retrieval import train_factors

    split = training_split(_first_ts(history), request.cutoff, request.horizon)
    if split is None:
        log.info("history too short for a labelled split: heuristic scorer")
        return None
    t = F.col("ts").cast("double")
    past = history.filter(t >= (split - request.lookback).timestamp()).filter(t < split.timestamp())
    labels = history.filter(t >= split.timestamp())
    factors = (train_factors(past, split, retrieval_cfg) if request.speculate().uses_factors()
               else (None, None))
    log.info("scorer training split at %s", split.isoformat())
    return mined_in_memory(spark, past, split, mine_cfg, factors), labels


def _choice_settings(config: RetrievalConfig) -> dict:
    """The choice model's settings for the report (``enabled`` False: its features were 0)."""
    return {"enabled": config.choice, "dim": config.choice_dim, "reg": config.choice_reg,
            "steps": config.choice_steps, "lr": config.choice_lr,
            "half_life_s": config.choice_half_life.total_seconds()}


def _budget(request: EvalRequest, future, known_users) -> int:
    """The per-user budget: given, or ``budget_factor`` x mean future distinct pairs per user."""
    if request.budget_per_user is not None:
        return request.budget_per_user
    from solaris_lib.evaluation.speculation import coverage_metrics

    empty = future.limit(0).select("user_id", "item_id")
    mean = coverage_metrics(empty, future, known_users)["mean_future_pairs_per_user"] or 0.0
    return max(1, round(request.budget_factor * mean))


def _speculate_config(request: EvalRequest, budget: int, known_users) -> SpeculateConfig:
    """Per-user allocation: each known user keeps its ``budget`` best pairs. Global: the same
    total (``budget`` x known users) goes to the best pairs across users, one user keeping at
    most ``GLOBAL_USER_CAP`` x ``budget``; the candidate pools are sized by ``budget`` alike."""
    common = {"budget_per_user": budget, "scorer": request.scorer, "faiss_k": request.faiss_k,
              "sources": request.sources, **request.live}
    if request.allocation == "per-user":
        return speculate_config(global_budget=request.global_budget, **common)
    total = budget * max(1, known_users.count())
    return speculate_config(global_budget=total, max_per_user=GLOBAL_USER_CAP * budget, **common)


def _dump_future(future, known_users, config: SpeculateConfig, out: str) -> None:
    """With ``--dump-candidates``: the known users' future rows per pair (``future``: user_id,
    item_id, rows; every pair, in a pool or not, so that a replay's coverage has the report's
    denominator) and ``budget.json`` (the per-user budget and the global budget, None per user)."""
    import json
    from pathlib import Path

    from solaris_lib.speculation.scorer import pair_rows

    known = future.join(known_users.select("user_id"), "user_id")
    pair_rows(known).write.mode("overwrite").parquet(str(Path(out) / "future"))
    (Path(out) / "budget.json").write_text(json.dumps(
        {"budget_per_user": config.budget_per_user, "global_budget": config.global_budget}))


def _empty_report(request: EvalRequest, reason: str) -> dict:
    log.warning("%s", reason)
    return {"coverage": None, "coverage_all": None, "waste": None, "pairs_precomputed": 0,
            "budget_per_user": request.budget_per_user, "mean_future_pairs_per_user": None,
            "baselines": {}, "note": reason}


def evaluate_speculation(spark, request: EvalRequest) -> dict:
    """Run speculation at ``request.cutoff`` and score it on the horizon; returns the report.
    The windows it caches are released before it returns (a session may run many)."""
    started = time.monotonic()
    history = _window(spark, request.logs, request.cutoff - request.lookback, request.cutoff).cache()
    future = _window(spark, request.logs, request.cutoff, request.cutoff + request.horizon).cache()
    try:
        return _evaluate(spark, request, history, future, started)
    finally:
        history.unpersist()
        future.unpersist()
        collect_garbage(spark)


def _evaluate(spark, request: EvalRequest, history, future, started: float) -> dict:
    """:func:`evaluate_speculation` on the cached history and future windows."""
    from solaris_lib.speculation.retrieval import train_factors

    mine_cfg = MineConfig(lookback=request.lookback)
    retrieval_cfg = request.retrieval()
    with step("read the history") as done:
        rows = history.count()  # the window is cached: this reads it once
        done.count(rows, "rows")
    if rows == 0:
        return _empty_report(request, "no history before the cutoff: nothing to speculate from")
    with step("retrieval factors"):
        factors = (train_factors(history, request.cutoff, retrieval_cfg)
                   if request.speculate().uses_factors() else (None, None))
    with step("mine the history"):
        mined = mined_in_memory(spark, history, request.cutoff, mine_cfg, factors)
    try:
        return _evaluate_mined(spark, request, (history, future), mined, (mine_cfg, retrieval_cfg),
                               started)
    finally:
        mined.release(factors=True)


def _evaluate_mined(spark, request: EvalRequest, windows, mined, configs, started: float) -> dict:
    """:func:`_evaluate` once the history is mined: speculate, score, compare with baselines.
    ``windows``: (history, future) rows; ``configs``: (MineConfig, RetrievalConfig) of the run.
    Releases what it caches on every path (the caller releases ``mined``)."""
    from solaris_lib.evaluation.speculation import coverage_curve, coverage_metrics, log_shape

    history, future = windows
    budget = _budget(request, future, mined.user_stats)
    config = _speculate_config(request, budget, mined.user_stats)
    with step("scorer's training split"):
        train_on = None if request.scorer == "heuristic" else train_inputs(
            spark, request, history, *configs)
    try:
        with step("speculate") as done:
            result = speculate_frames(spark, mined, config, train_on=train_on, dump=request.dump)
            if request.dump:
                _dump_future(future, mined.user_stats, config, request.dump)
            ranked = result.ranked.cache()
            done.count(ranked.count(), "pairs")
    finally:
        if train_on is not None:
            train_on[0].release(factors=True)
    try:
        with step("coverage"):
            report = coverage_metrics(ranked, future, mined.user_stats)
            budgets = sorted({max(1, round(budget * f)) for f in (0.125, 0.25, 0.5, 0.75, 1.0)})
            curves = {"solaris": coverage_curve(ranked, future, mined.user_stats, budgets)}
        with step("baselines"):
            baselines = _baselines(result, future, budgets, curves, report["future_rows_known"])
        report.update({
            "budget_per_user": budget, "allocation": request.allocation,
            "global_budget": config.global_budget, "faiss_k": config.faiss_count(),
            "selected": result.scorer, "baselines": baselines,
            "best_baseline": _best(baselines),
            "validation": result.validation.report() if result.validation else None,
            "popularity_measure": result.config.popular_by[0],
            "candidates": result.candidates, "faiss_index": result.faiss_kind,
            "faiss_recall": result.faiss_recall, "faiss_vectors": faiss_feature(mined),
            "coverage_vs_budget": curves,
            "live_window_s": result.live_window.total_seconds(),
            "shape": log_shape(history, future, mined.user_stats),
            "cutoff": request.cutoff.isoformat(), "horizon_s": request.horizon.total_seconds(),
            "lookback_s": request.lookback.total_seconds(),
            "als": configs[1].model_dump(include=set(ALS_FIELDS)),
            "choice": _choice_settings(configs[1]),
            "seconds": round(time.monotonic() - started, 1),
        })
        if request.out:
            report["plot"] = _write_outputs(ranked, request.out, curves, report)
        return report
    finally:
        ranked.unpersist()
        result.release()


def _best(baselines: dict) -> dict | None:
    """The best single-source baseline: {name, coverage}; None without any."""
    scored = {n: c for n, c in baselines.items() if c is not None}
    if not scored:
        return None
    name = max(scored, key=scored.get)
    return {"name": name, "coverage": scored[name]}


def _baselines(result, future, budgets, curves: dict, rows_known) -> dict:
    """Coverage of known users for each single-source ranking of the run's own candidates
    (:data:`selection.SINGLE_SOURCES` among the run's sources; the same budgets and live items),
    selected as the run would select with that ranking; adds each one's coverage-vs-budget
    curve (per-user truncation of its selection) to ``curves``."""
    import numpy as np
    from pyspark.sql import functions as F

    from solaris_lib.evaluation.speculation import ratio
    from solaris_lib.speculation.scorer import pair_rows
    from solaris_lib.speculation.selection import (
        SINGLE_SOURCES,
        Budget,
        per_user_rank,
        select,
        user_cap,
    )

    config = result.config
    names = [n for n in SINGLE_SOURCES if n in config.sources]
    frame = result.features.select("user_id", "item_id", *[f"score_{n}" for n in names]).join(
        pair_rows(future), ["user_id", "item_id"], "left").fillna(0.0, subset=["rows"])
    local = frame.withColumn("rows", F.col("rows").cast("double")).toPandas()
    user, item = local["user_id"].to_numpy(np.int64), local["item_id"].to_numpy(np.int64)
    rows = local["rows"].to_numpy(np.float64)
    out = {}
    for name in names:
        score = local[f"score_{name}"].to_numpy(np.float64)
        kept = select(user, item, score, Budget(user_cap(name, config), config.global_budget))
        out[name] = ratio(rows[kept].sum(), rows_known)
        rank = per_user_rank(user, item, np.where(kept, score, np.nan))
        curves[name] = [{"budget": b, "coverage": ratio(rows[(rank > 0) & (rank <= b)].sum(),
                                                        rows_known)} for b in budgets]
    return out


def _write_outputs(ranked, out: str, curves: dict, report: dict) -> str:
    """Write the chosen pairs (parquet), the report (JSON) and the coverage PNG under ``out``."""
    import json
    from pathlib import Path

    from solaris_lib.evaluation.speculation import plot_coverage_curves
    from solaris_lib.speculation.io import write_partition

    Path(out).mkdir(parents=True, exist_ok=True)
    write_partition(ranked.select("user_id", "item_id", "score", "sources"),
                    str(Path(out) / "speculated"), ["user_id", "item_id"])
    png = plot_coverage_curves(curves, str(Path(out) / "coverage_vs_budget.png"),
                               f"coverage vs budget (cutoff {report['cutoff'][:16]})")
    (Path(out) / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return png
