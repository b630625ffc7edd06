"""Foundation model quality between its references, on identical held-out rows.

Simulates a world (default: the simulator's default world) or reads ``--logs``, trains on every
day but the last and scores the last day's labelled rows with:

* ``constant``: the training click rate (the floor);
* ``id_only``: hashed user and item ids with their interaction (``model/baseline.py``);
* ``plain``: the small online ranker's plain variant (ids, user activity over 7 days and item
  popularity over 1 day, refreshed hourly as serving would);
* ``recency_lr``: logistic regression on the user's decayed click counts (``model/recency.py``);
* ``fm``: the foundation model, trained by the training job's own recipe (``train.fit``);
* ``bayes``: the simulator's true click probability ``p_click``, read by this evaluation only
  (the ceiling; absent for logs that do not carry it).

Intervals are paired bootstraps over users (``evaluation/bootstrap.py``). Last line: one JSON
object with the figures, ``gap_closed_logloss`` = (id_only - fm) / (id_only - bayes) and
``embedding_offset_share`` = |mean embedding|^2 / mean |embedding|^2 over the scored pairs.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from datetime import timedelta

import numpy as np

from solaris_lib.evaluation import metrics
from solaris_lib.evaluation.bootstrap import gap_share, logloss_difference
from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window
from solaris_lib.model.config import FoundationConfig
from solaris_lib.model.examples import Examples, build_examples
from solaris_lib.model.recency import recency_baseline
from solaris_lib.model.train import evaluate_baseline_logits, fit, predict, split
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.world import Simulator

log = logging.getLogger("foundation_quality")
HOUR_US = 3_600_000_000
ACTIVITY_WINDOW_US = 7 * 24 * HOUR_US
POPULARITY_WINDOW_US = 24 * HOUR_US


def counts_in_window(keys: np.ndarray, ts_us: np.ndarray, q_keys: np.ndarray,
                     q_ts_us: np.ndarray, window_us: int) -> np.ndarray:
    """(m,) float32: rows of ``keys`` (n,) with ``q_t - window <= ts < q_t``, per query key.

    Rows and queries sort on one int64 key (key rank, time): two searchsorted calls."""
    uniq = np.unique(keys)
    span = int(max(ts_us.max(), q_ts_us.max()) - min(ts_us.min(), q_ts_us.min() - window_us)) + 1
    base = int(min(ts_us.min(), q_ts_us.min() - window_us))
    if (len(uniq) + 1) * span >= 2**62:
        raise ValueError("too many keys x microseconds for one int64 sort key")
    rank = np.searchsorted(uniq, keys).astype(np.int64)
    combined = np.sort(rank * span + (ts_us - base))
    q_rank = np.searchsorted(uniq, q_keys).astype(np.int64)
    known = (q_rank < len(uniq)) & (uniq[np.minimum(q_rank, len(uniq) - 1)] == q_keys)
    hi = np.searchsorted(combined, q_rank * span + (q_ts_us - base), "left")
    lo = np.searchsorted(combined, q_rank * span + (q_ts_us - window_us - base), "left")
    return np.where(known, hi - lo, 0).astype(np.float32)


def plain_ranker_logits(table, train: Examples, held: Examples, seed: int) -> np.ndarray:
    """(held pairs,) logits of the transfer report's plain ranker, trained on ``train``."""
    from solaris_lib.logs.schema import timestamps_us
    from solaris_lib.transfer.config import RankerConfig
    from solaris_lib.transfer.features import RankerRows
    from solaris_lib.transfer.ranker import train_ranker

    ev = train.events
    ev_users, log_ts = np.repeat(ev.users, np.diff(ev.offsets)), timestamps_us(table["ts"])
    log_items = table["item_id"].to_numpy()

    def rows(ex: Examples) -> RankerRows:
        counts = np.diff(ex.t_offsets)
        users, ts = np.repeat(ex.user, counts), np.repeat(ex.ts_us, counts)
        hour = ts - ts % HOUR_US  # serving features refresh hourly
        n, none = len(users), np.zeros((len(users), 1), np.float32)
        return RankerRows(
            users=users, items=ex.t_items, labels=ex.t_labels, ts_us=ts,
            interval=np.zeros(n, np.int32),
            activity=counts_in_window(ev_users, ev.ts_us, users, hour, ACTIVITY_WINDOW_US),
            popularity=counts_in_window(log_items, log_ts, ex.t_items, hour,
                                        POPULARITY_WINDOW_US),
            fm_logit=np.zeros(n), exact_level=np.zeros(n, np.int8), exact_emb=none,
            fallback_level=np.zeros(n, np.int8), fallback_emb=none)

    ranker = train_ranker(rows(train), "plain", RankerConfig(seed=seed))
    return ranker.predict(rows(held))


def offset_share(emb: np.ndarray) -> float:
    """|mean e|^2 / mean |e|^2: 1 when every vector is the same, near 0 when centred."""
    return float(np.square(emb.mean(0)).sum() / np.square(emb).sum(1).mean())


def overrides_of(pairs: list[str]) -> dict:
    """``["layers=1", ...]`` -> typed FoundationConfig overrides (the ablations)."""
    import dataclasses

    types = {f.name: f.type for f in dataclasses.fields(FoundationConfig)}
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        kind = {"int": int, "float": float, "bool": lambda v: v.lower() in ("1", "true"),
                "str": str}[str(types[key])]
        out[key] = kind(value)
    return out


def evaluate(logs: str, preset: str, epochs: int | None, seed: int,
             changes: dict | None = None) -> dict:
    """Every reference and the FM on the last day of the logs under ``logs``."""
    started = time.perf_counter()
    first, end = _span(logs)
    read = read_window(logs, Interval(first, end), with_eval=True)
    table = read.table
    train, held = split(build_examples(table), end - timedelta(days=1))
    log.info("%d training requests (%d pairs), %d held-out pairs", len(train), train.pairs,
             held.pairs)
    overrides = {"seed": seed} if epochs is None else {"seed": seed, "epochs": epochs}
    cfg = FoundationConfig.preset(preset, **{**overrides, **(changes or {})})
    net, curve = fit(cfg, train)
    fm, emb = predict(net, held, embeddings=True)
    logits = {
        "constant": np.full(held.pairs, _logit(train.t_labels.mean())),
        "id_only": evaluate_baseline_logits(train, held, seed),
        "plain": plain_ranker_logits(table, train, held, seed),
        "recency_lr": recency_baseline(train, held),
        "fm": fm,
    }
    if "p_click" in table.column_names:
        p = np.clip(table["p_click"].to_numpy(zero_copy_only=False)[held.t_rows], 1e-7, 1 - 1e-7)
        logits["bayes"] = _logit(p.astype(np.float64))
    return _figures(held, logits, emb, curve, time.perf_counter() - started)


def _figures(held: Examples, logits: dict, emb: np.ndarray, curve, seconds: float) -> dict:
    y, users = held.t_labels, np.repeat(held.user, np.diff(held.t_offsets))
    out = {"holdout_pairs": int(held.pairs), "holdout_ctr": round(float(y.mean()), 5)}
    for name, z in logits.items():
        s = metrics.summary(y, z)
        out[f"{name}_logloss"], out[f"{name}_auc"] = round(s["log_loss"], 5), round(s["roc_auc"], 4)
    for ref in ("recency_lr", "plain", "id_only"):
        diff = logloss_difference(y, logits[ref], logits["fm"], users)
        out[f"fm_gain_over_{ref}"] = _interval(diff)
    if "bayes" in logits:
        gap = gap_share(y, logits["id_only"], logits["fm"], logits["bayes"], users)
        out["gap_closed_logloss"] = round(gap["value"], 4) if gap["value"] is not None else None
        out["gap_closed_logloss_ci"] = _interval(gap)[1:]
    out["embedding_offset_share"] = round(offset_share(emb), 4)
    out["centred_offset_share"] = round(offset_share(emb - emb.mean(0)), 4)
    out["fm_best_epoch"] = min((c for c in curve if c.validation_loss is not None),
                               key=lambda c: c.validation_loss, default=curve[-1]).epoch
    out["fm_learning_curve"] = [[c.epoch, round(c.train_loss, 5),
                                 None if c.validation_loss is None else round(c.validation_loss, 5)]
                                for c in curve]
    out["seconds"] = round(seconds, 1)
    return out


def _interval(result: dict) -> list:
    """[value, low, high] rounded, or Nones."""
    return [None if result[k] is None else round(result[k], 5) for k in ("value", "low", "high")]


def _logit(p):
    return np.log(p / (1 - p))


def _span(logs: str):
    from solaris_lib.transfer.experiment import log_span

    return log_span(logs)


def main() -> None:
    defaults = WorldConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", help="request logs to evaluate (default: simulate a world)")
    parser.add_argument("--users", type=int, default=defaults.users)
    parser.add_argument("--items", type=int, default=defaults.items)
    parser.add_argument("--days", type=int, default=defaults.days)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=None, help="most FM epochs (preset's)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a FoundationConfig field (an ablation), e.g. "
                        "layers=1; repeatable")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="solaris-bench-fm-") as work:
        logs = args.logs
        if logs is None:
            world = WorldConfig(users=args.users, items=args.items, days=args.days,
                                seed=args.seed)
            logs = Simulator(world).run(f"{work}/logs").out
        figures = evaluate(logs, args.preset, args.epochs, seed=0, changes=overrides_of(args.set))
    print(json.dumps({"logs": args.logs or {"users": args.users, "items": args.items,
                                            "days": args.days, "seed": args.seed},
                      "preset": args.preset, "overrides": args.set, **figures}))


if __name__ == "__main__":
    main()
