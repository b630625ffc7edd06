"""The per-interval runs of mine, retrieval and speculate (what the jobs and the CLI call).

The run for ``[s, e)``:

* ``mine`` reads ``[e - lookback, e)`` and writes ``mined/<table>/interval=KEY``.
* ``retrieval`` reads the same window and writes ``retrieval/interval=KEY/{users,items}`` (ALS)
  and ``{choice_users,choice_items}`` (the choice model).
* ``speculate`` predicts the pairs of ``[e, e + (e - s))`` from the mined tables of ``KEY``, the
  newest complete retrieval partition whose key is <= ``KEY``, and the misses of ``[s, e)``. Its
  scorer is trained on the previous interval ``[s - L, s)`` when that interval's mined tables
  exist: candidates as of ``s`` (with the misses of ``[s - L, s)``), labels = the pairs logged
  in ``[s, e)``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from solaris_lib.errors import EmptyInputError
from solaris_lib.intervals import Interval
from solaris_lib.layout import MINED, RETRIEVAL, SPECULATED, DataLayout, join
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.sparkutil import read_parquet
from solaris_lib.speculation import mine as mining
from solaris_lib.speculation import scorer
from solaris_lib.speculation.candidates import (
    calibrate_live_window,
    faiss_feature,
    gather,
    live_items,
    seen_lists,
)
from solaris_lib.speculation.config import MineConfig, RetrievalConfig, SpeculateConfig
from solaris_lib.speculation.io import (
    RETRIEVAL_USED,
    fitted_by,
    newest_trained_by,
    read_partition,
    retrieval_record,
    retrieval_used,
    write_partition,
    write_trained_until,
)
from solaris_lib.speculation.mined import Mined
from solaris_lib.speculation.popular import available_measures, choose_measure
from solaris_lib.speculation.selection import (
    Budget,
    Validation,
    ranked_by,
    ranking_scores,
    user_cap,
    validate,
)
from solaris_lib.storage import exists, is_complete

log = logging.getLogger(__name__)

OUTPUT_COLUMNS = ("user_id", "item_id", "score", "sources")


@dataclass
class SpeculationResult:
    """The chosen pairs (user_id, item_id, score, sources) and facts about the run."""

    pairs: object
    ranked: object  # pairs plus ``rank`` (1 = the user's best), for coverage-vs-budget curves
    scorer: str  # the ranking kept (selection.RANKINGS)
    faiss_kind: str | None
    faiss_recall: float | None
    candidates: int
    cached: tuple = ()  # frames ``pairs`` and ``ranked`` are computed from
    live_window: timedelta | None = None  # the live window used (calibrated when trained)
    validation: Validation | None = None  # every ranking's coverage on the labelled interval
    config: SpeculateConfig | None = None  # the run's config, calibrated (window, measure)
    features: object = None  # the candidates with features and ranking scores (cached)
    model: object = None  # the learned scorer, None without one

    def release(self) -> None:
        """Unpersist the candidates, features and live items behind ``pairs``; call it once
        ``pairs`` or ``ranked`` is written or cached (Spark would recompute them afterwards)."""
        for frame in self.cached:
            frame.unpersist()


def history_window(end: datetime, lookback) -> Interval:
    return Interval(end - lookback, end)


def mined_in_memory(spark, logs, end: datetime, config: MineConfig, factors=(None, None)) -> Mined:
    """Mine ``logs`` (already windowed) into cached DataFrames without writing them
    (``Mined.release`` unpersists them). ``factors``: (ALS users, ALS items) and optionally
    (choice users, choice items) after them, as :func:`retrieval.train_factors` returns."""
    tables = {k: v.cache() for k, v in mining.mine(logs, end, config).items()
              if k != "user_history"}
    return Mined(end, tables["pair_stats"], tables["item_stats"], tables["user_stats"],
                 tables["cooccurrence"], *factors)


def run_mine(spark, layout: DataLayout, interval: Interval, config: MineConfig) -> dict[str, int]:
    """Mine the lookback window ending at ``interval.end``; returns rows written per table."""
    window = history_window(interval.end, config.lookback)
    logs = read_window_spark(spark, layout.logs, window).cache()
    tables = mining.mine(logs, interval.end, config)
    written = {}
    for name, df in tables.items():
        path = layout.output(MINED, interval, name)
        written[name] = write_partition(df, path, mining.SORT_KEYS[name])
    logs.unpersist()
    return written


def load_mined(spark, layout: DataLayout, interval: Interval, key: str | None) -> Mined:
    """The mined tables of ``interval`` plus the factors of the retrieval partition ``key``
    (:func:`retrieval_keys`; None: none)."""
    tables = {name: read_partition(spark, layout.output(MINED, interval, name))
              for name in ("pair_stats", "item_stats", "user_stats", "cooccurrence")}
    factors = factors_of(spark, layout, key, interval, choice=True)
    return Mined(interval.end, tables["pair_stats"], tables["item_stats"], tables["user_stats"],
                 tables["cooccurrence"], *factors)


def retrieval_keys(layout: DataLayout, interval: Interval) -> tuple[str | None, str | None]:
    """(current, previous): the retrieval partitions a speculate run of ``interval`` reads for
    its own features and for those of the labelled previous interval.

    Each as the interval's speculated partition recorded it (:func:`io.retrieval_used`: the
    latest run of this interval), while that partition is complete and fitted by its
    interval's end: a rerun, and the same run's inference, read what that run read, though a
    newer partition fitted by the interval's end was completed meanwhile (the daily retrieval
    run starts with the hour ending at midnight); a run that read none reads none again. A
    retrieval partition rewritten under the same key (a retrieval rerun) is read as it is
    now. Without a record, or for a key whose partition is gone or no longer fitted by that
    end: the newest fitted on logs up to that end (:func:`io.newest_trained_by`)."""
    root = layout.stage_root(RETRIEVAL)
    ends = (interval.end, interval.previous().end)
    used = retrieval_used(layout.output(SPECULATED, interval), interval)
    if used is None or (used["current"] is None and used["previous"] is not None):
        return tuple(newest_trained_by(root, end) for end in ends)
    keys = []
    for name, key, end in zip(("current", "previous"), (used["current"], used["previous"]),
                              ends, strict=True):
        if key is None or (is_complete(join(root, f"interval={key}")) and
                           fitted_by(root, key, end)):
            keys.append(key)
            continue
        newest = newest_trained_by(root, end)
        log.warning("retrieval partition %s, which the speculate run of %s read (%s), is gone "
                    "or no longer fitted on logs up to %s: %s is read instead", key, interval,
                    name, end.isoformat(), newest)
        keys.append(newest)
    return keys[0], keys[1]


def load_factors(spark, layout: DataLayout, interval: Interval, choice: bool = False):
    """(user_factors, item_factors) of the retrieval partition the runs of ``interval`` read
    (:func:`retrieval_keys`); with ``choice``, (choice users, choice items) after them (None
    when that partition has no choice vectors: written by an older version or with ``choice``
    off)."""
    return factors_of(spark, layout, retrieval_keys(layout, interval)[0], interval, choice)


def factors_of(spark, layout: DataLayout, key: str | None, interval: Interval,
               choice: bool = False):
    """The factors of :func:`load_factors` from the retrieval partition ``key`` (None: none)."""
    if key is None:
        log.info("no retrieval factors (none fitted on logs up to %s, or the interval's "
                 "speculate run read none): faiss candidates skipped", interval.end.isoformat())
        return (None,) * (4 if choice else 2)
    base = join(layout.stage_root(RETRIEVAL), f"interval={key}")
    log.info("retrieval factors of %s", key)
    factors = (read_parquet(spark, join(base, "users")), read_parquet(spark, join(base, "items")))
    if not choice:
        return factors
    if not exists(join(base, "choice_items")):
        log.info("retrieval %s has no choice vectors: the choice features are 0", key)
        return (*factors, None, None)
    return (*factors, read_parquet(spark, join(base, "choice_users")),
            read_parquet(spark, join(base, "choice_items")))


def run_retrieval(spark, layout: DataLayout, interval: Interval, config: RetrievalConfig) -> int:
    """Train ALS and the choice model on the lookback window ending at ``interval.end``; returns
    users with ALS factors."""
    from solaris_lib.speculation.retrieval import train_factors
    from solaris_lib.storage import atomic_folder

    logs = read_window_spark(spark, layout.logs,
                             history_window(interval.end, config.lookback)).cache()
    names = ("users", "items") + (("choice_users", "choice_items") if config.choice else ())
    fitted = train_factors(logs, interval.end, config)[:len(names)]
    frames = [frame if frame is not None else
              spark.createDataFrame([], f"{key} long, factor array<float>")
              for frame, key in zip(fitted, ("user_id", "item_id") * 2, strict=False)]
    counts = [frame.count() for frame in frames]
    with atomic_folder(layout.output(RETRIEVAL, interval)) as staging:
        for name, frame, key in zip(names, frames, ("user_id", "item_id") * 2, strict=False):
            frame.orderBy(key).coalesce(1).write.mode("overwrite").parquet(join(staging, name))
        write_trained_until(staging, interval.end)
    for frame in (*frames, logs):
        frame.unpersist()
    log.info("retrieval %s: %s", interval.key,
             ", ".join(f"{count} {name}" for name, count in zip(names, counts, strict=False)))
    return counts[0]


def speculate_frames(spark, mined: Mined, config: SpeculateConfig, *, train_on=None,
                     misses=None, past_misses=None, dump: str | None = None) -> SpeculationResult:
    """Choose the pairs to precompute from ``mined``.

    ``train_on``: (Mined as of the previous interval's end, log rows of the interval that
    followed it): the labelled interval on which the run calibrates its live window
    (:func:`calibrate_live_window`), chooses its popularity measure
    (:func:`popular.choose_measure`), fits the learned scorer and, with ``config.scorer`` auto,
    validates every ranking and keeps the best (:func:`selection.validate`). None:
    ``config.live_window``, the first measure and the heuristic (or the ranking named by
    ``config.scorer``).
    ``misses`` / ``past_misses``: the client's reported misses (user_id, item_id) of the
    interval and of the labelled previous one (its candidates' ``miss`` source), so the learned
    scorer learns what a reported miss is worth.
    ``dump``: a folder that receives the scorer's inputs as parquet, for offline scorer
    experiments (``benchmarks/scorer_replay.py``): ``train`` (the previous interval's labelled
    candidates: ids, :data:`scorer.FEATURES`, ``rows``, ``label``) and ``candidates`` (this
    run's candidates: ids, features, ``sources``, ``score``).
    """
    started = time.monotonic()
    model, validation = None, None
    if train_on is not None:
        config = calibrated(spark, *train_on, config)
    if train_on is not None and config.fits_scorer():
        model, validation = _fit_and_validate(spark, train_on, mined, config, dump,
                                              past_misses)
    elif config.scorer == "learned":
        log.warning("no labelled previous interval: the heuristic scorer is used")
    ranking = _ranking(config, model, validation)
    found = gather(spark, mined, config, misses)
    needs_factors = model is not None or bool({"faiss", "item_faiss"} & set(config.sources))
    features = ranking_scores(scorer.add_features(found.pairs, mined, with_als=needs_factors),
                              faiss_feature(mined))
    features = features.cache()
    candidates = features.count()
    log.info("%d candidates with features in %.1f s", candidates, time.monotonic() - started)
    scored = ranked_by(features, ranking, model)
    if dump:
        _dump(scored.select("user_id", "item_id", *scorer.FEATURES, "sources", "score"),
              join(dump, "candidates"))
    chosen = scorer.apply_budgets(scored, user_cap(ranking, config), config.global_budget)
    log.info("speculated from %d candidates ranked by %s in %.1f s", candidates, ranking,
             time.monotonic() - started)
    return SpeculationResult(chosen.select(*OUTPUT_COLUMNS), chosen, ranking, found.faiss_kind,
                             found.faiss_recall, candidates, (features, *found.cached),
                             config.live_window, validation, config, features, model)


def _ranking(config: SpeculateConfig, model, validation) -> str:
    """The ranking the run keeps: validated, named by the config, or the fallback."""
    if validation is not None:
        return validation.selected
    if config.scorer == "learned" and model is not None:
        return "learned"
    return config.scorer if config.scorer not in ("auto", "learned") else "heuristic"


def calibrated(spark, past: Mined, labels, config: SpeculateConfig) -> SpeculateConfig:
    """``config`` with the live window and the popularity measure chosen on the labelled
    previous interval (``past``, ``labels``)."""
    config = config.model_copy(update={"live_window": calibrate_live_window(past, labels, config)})
    if "popular" not in config.sources or len(available_measures(past, config)) < 2:
        return config
    live = live_items(past, config).cache()
    seen = seen_lists(past) if "repeat" in config.sources else None
    measure, _ = choose_measure(past, labels, live, seen, config)
    for frame in (live, seen):
        if frame is not None:
            frame.unpersist()
    return config.model_copy(update={"popular_by": (measure,)})


def _fit_and_validate(spark, train_on, mined: Mined, config: SpeculateConfig, dump,
                      past_misses=None):
    """(model, validation): the learned scorer fitted on the labelled previous interval (its
    candidates gathered from its mined tables and ``past_misses``, that interval's reported
    misses) and, with ``config.scorer`` auto, every ranking validated there (None otherwise)."""
    from pyspark.sql import functions as F

    past, labels = train_on
    started = time.monotonic()
    past_found = gather(spark, past, config, past_misses)
    labelled = scorer.label(scorer.add_features(past_found.pairs, past), labels).cache()
    log.info("%d labelled candidates of the previous interval in %.1f s", labelled.count(),
             time.monotonic() - started)
    if dump:
        _dump(labelled.select("user_id", "item_id", *scorer.FEATURES, "rows", "label"),
              join(dump, "train"))
    sample = scorer.training_sample(labelled, seed=config.seed)
    model = scorer.fit_sample(sample)
    validation = None
    if config.scorer == "auto":
        users = past.user_stats.select("user_id")
        known = users.join(labels.groupBy("user_id").agg(F.count(F.lit(1)).alias("rows")),
                           "user_id", "left").fillna(0, subset=["rows"])
        budget = Budget(config.user_cap(), config.global_budget).scaled(
            users.count(), mined.user_stats.count())
        validation = validate(labelled, known, budget, config, sample if model else None,
                              faiss_feature(past))
    for frame in (labelled, *past_found.cached):
        frame.unpersist()
    return model, validation


def _dump(frame, path: str) -> None:
    """Write ``frame`` as parquet at ``path`` (overwritten) and log where."""
    frame.write.mode("overwrite").parquet(path)
    log.info("dumped the scorer's inputs to %s", path)


def run_speculate(spark, layout: DataLayout, interval: Interval, config: SpeculateConfig,
                  misses=None, past_misses=None) -> dict:
    """Speculate for the interval after ``interval`` and write ``speculated/interval=KEY``
    (``misses`` / ``past_misses``: :func:`speculate_frames`)."""
    keys = retrieval_keys(layout, interval)
    mined = load_mined(spark, layout, interval, keys[0])
    train_on = None
    previous = interval.previous()
    try:
        past = load_mined(spark, layout, previous, keys[1])
        # the labels: read (and validated) once, used by the calibration, the fit and the
        # validation alike
        future = read_window_spark(spark, layout.logs, interval).cache()
        if future.count():
            train_on = (past, future)
        else:  # a quiet hour: nothing to validate on (every ranking would cover 0 of 0 rows)
            log.info("the labelled interval %s has no log rows: scored as unlabelled",
                     interval.key)
            past.release()
            future.unpersist()
    except EmptyInputError as exc:
        log.info("no mined tables of the previous interval %s: %s", previous.key, exc)
    result = speculate_frames(spark, mined, config, train_on=train_on, misses=misses,
                              past_misses=past_misses)
    searched = faiss_feature(mined)
    rows = write_partition(result.pairs, layout.output(SPECULATED, interval), ["user_id", "item_id"],
                           markers={RETRIEVAL_USED: retrieval_record(interval, *keys)})
    result.release()
    for used in (mined, *(train_on[:1] if train_on else ())):
        used.release()
    if train_on:
        train_on[1].unpersist()
    return {"interval": interval.key, "pairs": rows, "scorer": result.scorer,
            "validation": result.validation.report() if result.validation else None,
            "popularity_measure": result.config.popular_by[0],
            "candidates": result.candidates, "faiss_index": result.faiss_kind,
            "faiss_recall": result.faiss_recall, "faiss_vectors": searched,
            "retrieval": keys[0], "retrieval_previous": keys[1] if train_on else None}
