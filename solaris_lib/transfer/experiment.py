"""The transfer experiment end to end: FM, per-interval caches, ranker rows, variants, metrics.

1. Read the logs once (pyarrow, validated); build every labelled request's example.
2. Train the FM on requests before ``split`` (the start of the ranker period).
3. For each interval of ``[split, end)``: the cache the previous interval's precompute run
   published, replayed by the pipeline's own stages (:class:`~solaris_lib.transfer.replay.Replay`),
   the rows' served levels and embeddings and serving-time features
   (:func:`~solaris_lib.transfer.features.interval_rows`).
4. Train every ranker variant (:data:`~solaris_lib.transfer.config.VARIANTS`) on the rows of
   ``[split, test_start)`` and score them and the FM served online (raw, and recalibrated on
   the ranker period) on ``[test_start, end)``, with paired bootstrap intervals over users.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from solaris_lib.errors import ConfigError, EmptyInputError
from solaris_lib.evaluation import metrics
from solaris_lib.evaluation.bootstrap import (
    bootstrap,
    gap_share,
    logloss_difference,
    paired_auc_delta,
    row_logloss,
)
from solaris_lib.fallback import Level
from solaris_lib.intervals import Interval
from solaris_lib.logs.schema import timestamps_us
from solaris_lib.transfer.config import LEVELS, VARIANTS, TransferConfig
from solaris_lib.transfer.features import RankerRows, coverage_by_level, interval_rows
from solaris_lib.transfer.ratio import transfer_ratios
from solaris_lib.transfer.replay import Replay

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Periods:
    """``[first, split)`` FM training, ``[split, test_start)`` ranker training,
    ``[test_start, end)`` held-out; ``intervals`` cut ``[split, end)``."""

    first: datetime
    split: datetime
    test_start: datetime
    end: datetime
    intervals: tuple[Interval, ...]

    def is_test(self, interval: Interval) -> bool:
        return interval.start >= self.test_start


def plan_periods(first: datetime, end: datetime, config: TransferConfig) -> Periods:
    """Cut the logs' span into the three periods; the ranker and test spans must be whole
    numbers of intervals and leave at least one day (and two intervals) for the FM."""
    step = config.interval
    test_start, split = end - config.test_span(), end - config.test_span() - config.ranker_span()
    for span in (config.test_span(), config.ranker_span()):
        if span % step:
            raise ConfigError(f"{span} is not a whole number of {step} intervals")
    if split - first < max(timedelta(days=1), 2 * step):
        raise ConfigError(f"logs [{first}, {end}) leave too little before {split} to train the "
                          "FM: simulate more days or shorten --ranker-days/--test-days")
    count = (end - split) // step
    intervals = tuple(Interval(split + k * step, split + (k + 1) * step) for k in range(count))
    return Periods(first, split, test_start, end, intervals)


def log_span(logs_root: str) -> tuple[datetime, datetime]:
    """(first hour, end of the last hour) of the logs' hour partitions."""
    from solaris_lib.logs.schema import parse_hour_partition
    from solaris_lib.storage import list_files

    hours = sorted({h for h in map(parse_hour_partition, list_files(logs_root)) if h})
    if not hours:
        raise EmptyInputError(f"no dt=/hour= log partitions under {logs_root}")
    first = hours[0].replace(hour=0)
    return first, hours[-1] + timedelta(hours=1)


def train_foundation(examples, split: datetime, config: TransferConfig):
    """A :class:`FoundationEmbedder` of the shipped model ``config.fm_model`` trained on the
    requests before ``split`` (CPU, seeded); any model of the contract serves the same way."""
    from solaris_lib.model.online import FoundationEmbedder
    from solaris_lib.model.train import fit, model_config

    overrides = {"seed": config.seed}
    if config.fm_epochs is not None:
        overrides["epochs"] = config.fm_epochs
    cfg = model_config(config.fm_model, config.fm_preset, **overrides)
    first = split - timedelta(days=config.fm_days) if config.fm_days else None
    keep = examples.ts_us < int(split.timestamp() * 1e6)
    if first is not None:
        keep &= examples.ts_us >= int(first.timestamp() * 1e6)
    train = examples.select(keep)
    if not len(train):
        raise EmptyInputError(f"no labelled requests before {split} to train the FM")
    started = time.perf_counter()
    net, curve = fit(cfg, train, device="cpu")
    log.info("FM (%s %s, best of %d epochs) trained on %d requests in %.1f s", config.fm_model,
             config.fm_preset, len(curve), len(train), time.perf_counter() - started)
    return FoundationEmbedder(net, f"transfer-{split:%Y%m%dT%H%M%SZ}", device="cpu",
                              autocast=False)


@dataclass
class Collected:
    train: RankerRows
    test: RankerRows
    intervals: list[dict]


def collect_rows(spark, logs_root: str, table, examples, fm, periods: Periods,
                 config: TransferConfig, work_root: str) -> Collected:
    """Ranker rows of every interval of ``[split, end)`` with their served features; the
    replayed pipeline writes its tables under ``work_root``."""
    from solaris_lib.model.train import predict

    period = examples.select(examples.ts_us >= int(periods.split.timestamp() * 1e6))
    fm_logits = predict(fm.net, period)
    log_users = table.column("user_id").to_numpy()
    log_items = table.column("item_id").to_numpy()
    log_ts = timestamps_us(table.column("ts"))
    replay = Replay(spark, logs_root, work_root, fm, config)
    parts, facts = _serve_intervals(replay, period, fm_logits, (log_users, log_items, log_ts),
                                    periods, config)
    if not parts[False] or not parts[True]:
        raise EmptyInputError("the ranker and test periods need at least one interval each")
    return Collected(RankerRows.concat(parts[False]), RankerRows.concat(parts[True]), facts)


def _serve_intervals(replay: Replay, period, fm_logits, logged, periods: Periods,
                     config: TransferConfig) -> tuple[dict[bool, list[RankerRows]], list[dict]]:
    """Serve each interval's cache and label its rows: ({is_test: rows}, per-interval facts).
    ``logged``: the (user, item, ts in us) arrays of the whole log."""
    log_users, log_items, log_ts = logged
    parts: dict[bool, list[RankerRows]] = {False: [], True: []}
    facts = []
    for index, interval in enumerate(periods.intervals):
        cache = replay.serve(interval)
        rows = interval_rows(period, fm_logits, log_users, log_items, log_ts, cache, index,
                             config)
        s, e = (int(t.timestamp() * 1e6) for t in (interval.start, interval.end))
        in_t = (log_ts >= s) & (log_ts < e)
        facts.append({"interval": interval.key, "test": periods.is_test(interval),
                      "pairs": len(cache.exact), "users": int(len(cache.users)),
                      "scorer": cache.scorer, "labelled_rows": len(rows),
                      **coverage_by_level(cache, log_users[in_t], log_items[in_t])})
        parts[periods.is_test(interval)].append(rows)
        log.info("interval %s: %s", interval.key, facts[-1])
    return parts, facts


def _metrics(labels, logits) -> dict:
    s = metrics.summary(labels, logits)
    return {"logloss": s["log_loss"], "auc": s["roc_auc"], "rows": s["pairs"]}


def _share(n: int, total: int) -> float | None:
    return n / total if total else None


def coverage_summary(facts: list[dict], test: RankerRows) -> dict:
    """Coverage of the held-out intervals over every logged row and over the labelled rows."""
    held = [f for f in facts if f["test"]]
    rows = sum(f["rows"] for f in held)
    by_level = {lv: _share(sum(f.get(lv, 0) for f in held), rows) for lv in LEVELS}
    causes = {c: _share(sum(f.get(f"miss_{c}", 0) for f in held), rows)
              for c in ("user_only", "item_only", "user_and_item")}
    n = len(test)
    return {
        "coverage": by_level["exact"],
        "coverage_with_fallback": None if by_level["miss"] is None else 1 - by_level["miss"],
        "coverage_by_level": by_level,
        "miss_by_cause": causes,
        "coverage_labelled": _share(int((test.fallback_level == Level.EXACT).sum()), n),
        "coverage_with_fallback_labelled": _share(int((test.fallback_level != Level.MISS).sum()),
                                                  n),
        "logged_rows": rows,
    }


def staleness(test: RankerRows, interval_starts_us: np.ndarray) -> dict:
    """Age (minutes) of the served embedding at request time: p50/p99 over hits."""
    hit = test.fallback_level != Level.MISS
    age = (test.ts_us[hit] - interval_starts_us[test.interval[hit]]) / 6e7
    if not len(age):
        return {"staleness_p50_min": None, "staleness_p99_min": None}
    return {"staleness_p50_min": float(np.percentile(age, 50)),
            "staleness_p99_min": float(np.percentile(age, 99))}


def calibrate_fm(train: RankerRows, test: RankerRows) -> np.ndarray:
    """(N_test,) float64 FM logits recalibrated on the ranker period: ``a z + b`` fitted by
    logistic regression on the training rows' (FM logit, click), as the ranker variants are
    fitted on those rows too (Platt scaling; the ranking, so the AUC, is unchanged)."""
    from solaris_lib.model.recency import fit_logistic

    if len(train) == 0 or train.labels.min() == train.labels.max():
        return np.asarray(test.fm_logit, np.float64)
    model = fit_logistic(train.fm_logit[:, None], train.labels.astype(np.float64))
    return model.logits(np.asarray(test.fm_logit, np.float64)[:, None])


def evaluate_variants(collected: Collected, config: TransferConfig) -> dict:
    """Train every variant on the training rows and score them and the FM on the test rows;
    paired bootstrap intervals (users resampled) for every difference to ``plain`` and for the
    transfer ratios."""
    from solaris_lib.transfer.ranker import train_ranker

    test = collected.test
    scores = {"fm_online": np.asarray(test.fm_logit, np.float64),
              "fm_calibrated": calibrate_fm(collected.train, test)}
    trained = {}
    for variant in VARIANTS:
        trained[variant] = train_ranker(collected.train, variant, config.ranker)
        scores[variant] = trained[variant].predict(test)
    results = {name: _metrics(test.labels, z) for name, z in scores.items()}
    on_level = {}
    for level in (Level.EXACT, Level.CLUSTER, Level.ITEM):
        rows = test.fallback_level == level
        on_level[level.name.lower()] = {v: _metrics(test.labels[rows], z[rows])
                                        for v, z in scores.items()}
    exact = test.fallback_level == Level.EXACT
    guard = paired_auc_delta(test.labels[exact], scores["solaris"][exact],
                             scores["solaris_fallback"][exact])
    return {"variants": results, "exact_hit_rows": on_level["exact"],
            "cluster_rows": on_level["cluster"], "item_rows": on_level["item"],
            "exact_hit_auc_delta": guard, "intervals": intervals(test, scores),
            "epochs": {v: t.epochs for v, t in trained.items()},
            "ratios": {v: transfer_ratios(results, v, fm=REFERENCE)
                       for v in VARIANTS if v != "plain"}}


REFERENCE = "fm_calibrated"  # the FM the ratios divide by: served online, recalibrated


def intervals(test: RankerRows, scores: dict[str, np.ndarray]) -> dict:
    """Paired bootstrap 95 % intervals over users: every model's log-loss gain over ``plain``
    (``gain_over_plain``), the transfer ratio of each variant against the recalibrated FM, and
    the embedding's share of the SOLARIS variant's gain."""
    y, users, plain = test.labels, test.users, scores["plain"]
    gains = {name: logloss_difference(y, plain, z, users)
             for name, z in scores.items() if name != "plain"}
    ratios = {v: gap_share(y, plain, scores[v], scores[REFERENCE], users)
              for v in VARIANTS if v != "plain"}
    values = np.stack([row_logloss(y, scores[n])
                       for n in ("plain", "solaris_hit_only", "solaris")], 1)
    embedding = bootstrap(values, users, _embedding_share)
    over_distilled = logloss_difference(y, scores["distilled"], scores["solaris"], users)
    return {"gain_over_plain": gains, "transfer_ratio": ratios, "embedding_share": embedding,
            "solaris_over_distilled": over_distilled}


def _embedding_share(m: np.ndarray) -> float | None:
    """(L_hit_only - L_solaris) / (L_plain - L_solaris) from the mean log-losses (plain,
    hit_only, solaris); None when solaris is not better than plain."""
    return None if m[0] - m[2] <= 1e-12 else float((m[1] - m[2]) / (m[0] - m[2]))


def save_collected(collected: Collected, fm_version: str, folder: str) -> None:
    """Keep the rows (npz) and interval facts (json) so the variants can be re-evaluated."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    np.savez(path / "train.npz", **asdict(collected.train))
    np.savez(path / "test.npz", **asdict(collected.test))
    (path / "meta.json").write_text(json.dumps({"intervals": collected.intervals,
                                                "fm_version": fm_version}))


def load_collected(folder: str) -> tuple[Collected, str]:
    import json
    from pathlib import Path

    path = Path(folder)
    meta = json.loads((path / "meta.json").read_text())
    parts = [RankerRows(**dict(np.load(path / f"{name}.npz"))) for name in ("train", "test")]
    return Collected(parts[0], parts[1], meta["intervals"]), meta["fm_version"]


def run_experiment(spark, logs_root: str, config: TransferConfig,
                   span: tuple[datetime, datetime] | None = None, rows_dir: str | None = None,
                   reuse_rows: bool = False) -> dict:
    """The whole experiment on the logs under ``logs_root``; returns the report dict.

    ``rows_dir``: where the collected ranker rows are saved; ``reuse_rows``: load them from
    there instead of training the FM and rebuilding the caches (same logs and config only).
    The replayed pipeline's tables live in a temporary folder, removed afterwards."""
    import tempfile

    import torch

    from solaris_lib.logs.reader import read_window
    from solaris_lib.model.examples import build_examples

    started = time.perf_counter()
    torch.set_num_threads(config.threads)
    first, end = span or log_span(logs_root)
    periods = plan_periods(first, end, config)
    if reuse_rows and rows_dir:
        collected, fm_version = load_collected(rows_dir)
    else:
        table = read_window(logs_root, Interval(first, end)).table
        examples = build_examples(table)
        fm = train_foundation(examples, periods.split, config)
        with tempfile.TemporaryDirectory(prefix="solaris-report-") as work_root:
            collected = collect_rows(spark, logs_root, table, examples, fm, periods, config,
                                     work_root)
        fm_version = fm.version
        if rows_dir:
            save_collected(collected, fm_version, rows_dir)
    evaluation = evaluate_variants(collected, config)
    starts = np.array([int(i.start.timestamp() * 1e6) for i in periods.intervals], np.int64)
    report = assemble(evaluation, collected, periods, config, fm_version)
    report.update(staleness(collected.test, starts))
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def _above_zero(ci: dict) -> bool:
    return ci.get("low") is not None and ci["low"] > 0


def headline(evaluation: dict) -> dict:
    """The transfer ratio of the ``solaris`` variant with its interval, printed only when the
    FM's own gain over ``plain`` has an interval above zero (else there is nothing to
    transfer and ``transfer_ratio_note`` says so), and the embedding's share of its gain."""
    ci = evaluation["intervals"]
    fm_gain = ci["gain_over_plain"][REFERENCE]
    ratio, share = ci["transfer_ratio"]["solaris"], ci["embedding_share"]
    out = {"fm_gain_over_plain": fm_gain, "transfer_ratio_logloss": None,
           "transfer_ratio_logloss_ci": None, "transfer_ratio_note": None,
           "embedding_share": share["value"], "embedding_share_ci": [share["low"], share["high"]]}
    if _above_zero(fm_gain):
        out["transfer_ratio_logloss"] = ratio["value"]
        out["transfer_ratio_logloss_ci"] = [ratio["low"], ratio["high"]]
    else:
        out["transfer_ratio_note"] = (
            "no ratio: the FM's log-loss gain over plain is {value} with 95 % interval "
            "[{low}, {high}], not above zero".format(**{k: _fmt_gain(fm_gain.get(k))
                                                        for k in ("value", "low", "high")}))
    return out


def _fmt_gain(value) -> str:
    return "n/a" if value is None else f"{value:+.5f}"


def assemble(evaluation: dict, collected: Collected, periods: Periods, config: TransferConfig,
             fm_version: str) -> dict:
    """The report's keys: headline ratio with its interval, per-variant metrics, coverage..."""
    v, ci = evaluation["variants"], evaluation["intervals"]
    fallback = evaluation["ratios"]["solaris_fallback"]
    over_distilled = ci["solaris_over_distilled"]
    variants = {name: {**m, "gain_over_plain": ci["gain_over_plain"].get(name),
                       "transfer_ratio": ci["transfer_ratio"].get(name)}
                for name, m in v.items()}
    return {
        **headline(evaluation),
        "transfer_ratio_auc": evaluation["ratios"]["solaris"]["auc"],
        "transfer_ratio_logloss_fallback": fallback["logloss"],
        "transfer_ratio_auc_fallback": fallback["auc"],
        "transfer_ratios": evaluation["ratios"], "reference": REFERENCE,
        **coverage_summary(collected.intervals, collected.test),
        "variants": variants,
        "logloss": {name: m["logloss"] for name, m in v.items()},
        "auc": {name: m["auc"] for name, m in v.items()},
        "solaris_over_distilled": over_distilled,
        "solaris_beats_distilled": _above_zero(over_distilled),
        "exact_hit_auc": {n: m["auc"] for n, m in evaluation["exact_hit_rows"].items()},
        "exact_hit_logloss": {n: m["logloss"] for n, m in evaluation["exact_hit_rows"].items()},
        "cluster_row_auc": {n: m["auc"] for n, m in evaluation["cluster_rows"].items()},
        "item_row_auc": {n: m["auc"] for n, m in evaluation.get("item_rows", {}).items()},
        "exact_hit_auc_delta": evaluation.get("exact_hit_auc_delta"),
        "ranker_epochs": evaluation["epochs"],
        "train_rows": len(collected.train), "test_rows": len(collected.test),
        "test_ctr": float(collected.test.labels.mean()) if len(collected.test) else None,
        "intervals": collected.intervals, "fm_version": fm_version,
        "periods": {"fm": [(max(periods.first, periods.split - timedelta(days=config.fm_days))
                            if config.fm_days else periods.first).isoformat(),
                           periods.split.isoformat()],
                    "ranker": [periods.split.isoformat(), periods.test_start.isoformat()],
                    "test": [periods.test_start.isoformat(), periods.end.isoformat()]},
        "config": config.model_dump(mode="json"),
    }
