"""Replay the speculation scorer offline on a ``speculation-eval`` dump: try a feature in seconds.

    solaris speculation-eval --logs var/world --cutoff 2026-01-12 --horizon 7d --budget-factor 3 \\
        --dump-candidates var/dump --json
    python benchmarks/scorer_replay.py --dump var/dump [--interact user_act:als] [--drop cooc]

A Spark run of the default world takes about 4 minutes; most of it is mining and candidate
generation, which a new scorer feature or model does not change. The dump holds what the
scorer saw (``train``: the earlier split's candidates with their features and label-window
rows; ``candidates``: the scored run's candidates with features and the Spark score;
``future``: the known users' future rows per pair; ``budget.json``). This script fits the
scorer's model again (the product's own numpy fit, ``solaris_lib.speculation.logistic``:
positives weighted by their rows, Newton steps on standardised features), scores the candidates and selects them with the run's
budgets, and reports coverage of the known users' future rows (the report's denominator) for:

* ``spark``: the Spark run's own scores (checks that the replay selects as the run did);
* ``floor``: the numpy refit on the same features (what a variant is compared with);
* ``variant``: the features changed by ``--interact A:B`` (adds A x B) and ``--drop F``;
* ``perfect``: the candidates ranked by their true future rows (the pools' ceiling);
* ``floor_in_sample`` (``--in-sample``): the same model fitted on the scored candidates' own
  future rows, each half of the users (a hash) scored by a fit on the other half: what these
  features can do when training and scoring share one geometry (the learner's reference above
  the floor; ``speculation-eval`` trains on a shorter split when the history is short);
* ``mlp`` (``--mlp``): a network (k-64-32-1, ReLU, k features) fitted by Poisson likelihood of the
  rows (log link) on the training split, and with ``--in-sample`` also ``mlp_in_sample``:
  a flexible learner on the same features, in both geometries.

Each under the per-user allocation (``budget_per_user`` each) and the global one (the same
total by score across users, one user at most ``--user-cap`` x the budget, by default the cap
of ``speculation-eval --allocation global``). Last line: one JSON object, with the variant's
coverage over the floor's as ``ratio_*``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from solaris_lib.speculation.scorer import FEATURES
from solaris_lib.speculation.scorer import fit_rows as scorer_fit_rows
from solaris_lib.speculation.selection import Budget, select

log = logging.getLogger("scorer_replay")


def load(dump: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(train, candidates with their future ``rows``, budgets) from a dump folder."""
    for part in ("train", "candidates", "future", "budget.json"):
        if not (dump / part).exists():
            raise SystemExit(f"scorer_replay: {dump / part} is missing: run speculation-eval "
                             "with --dump-candidates first (and a learned scorer)")
    train = pd.read_parquet(dump / "train")
    future = pd.read_parquet(dump / "future")
    candidates = pd.read_parquet(dump / "candidates").merge(
        future, on=["user_id", "item_id"], how="left").fillna({"rows": 0.0})
    absent = [f for f in FEATURES if f not in train.columns or f not in candidates.columns]
    if absent:
        raise SystemExit(f"scorer_replay: {dump} lacks the features {', '.join(absent)}: it was "
                         "dumped by an earlier version; run speculation-eval again")
    budgets = json.loads((dump / "budget.json").read_text())
    budgets["denominator"] = float(future["rows"].sum())
    return train, candidates, budgets


def design(frame: pd.DataFrame, features: list[str], interact: list[tuple[str, str]]) -> np.ndarray:
    """(rows, len(features) + len(interact)) float64 matrix of the model's inputs."""
    columns = [frame[f].to_numpy(np.float64) for f in features]
    columns += [frame[a].to_numpy(np.float64) * frame[b].to_numpy(np.float64) for a, b in interact]
    return np.column_stack(columns)


def coverage(candidates: pd.DataFrame, score: np.ndarray, budgets: dict, cap: int) -> dict:
    """Coverage of the future rows by the per-user and the global selection of ``score`` (one
    user at most ``cap`` x the budget in the global one)."""
    budget = budgets["budget_per_user"]
    user = candidates["user_id"].to_numpy(np.int64)
    item = candidates["item_id"].to_numpy(np.int64)
    rows = candidates["rows"].to_numpy(np.float64)
    score = np.asarray(score, np.float64)
    per_user = rows[select(user, item, score, Budget(budget))].sum()
    total = budgets.get("global_budget") or budget * len(np.unique(user))
    global_ = rows[select(user, item, score, Budget(cap * budget, total))].sum()
    denominator = budgets["denominator"]
    return {"per_user": round(per_user / denominator, 4), "global": round(global_ / denominator, 4)}


def fit_rows(x_fit: np.ndarray, rows: np.ndarray):
    """The product's fit (:func:`solaris_lib.speculation.scorer.fit_rows`: labels ``rows > 0``,
    positives weighted by their ``rows``) on ``x_fit`` (n, k)."""
    return scorer_fit_rows(x_fit, rows, tuple(f"x{k}" for k in range(x_fit.shape[1])))


def logistic_scores(x_fit: np.ndarray, rows: np.ndarray, x_apply: np.ndarray) -> np.ndarray:
    """Log-odds of ``x_apply`` (m, k) under :func:`fit_rows` of ``x_fit`` and ``rows``."""
    return fit_rows(x_fit, rows).logit(x_apply)


def mlp_scores(x_fit: np.ndarray, rows: np.ndarray, x_apply: np.ndarray, epochs: int = 8,
               seed: int = 0) -> np.ndarray:
    """Log of the expected rows of ``x_apply`` (m, k) under a 64-32 ReLU network fitted to
    ``rows`` (n,) of ``x_fit`` (n, k) by Poisson likelihood (Adam 3e-3, batches of 8,192,
    features standardised on ``x_fit``)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    mean, scale = x_fit.mean(0), x_fit.std(0) + 1e-6
    x = torch.from_numpy(((x_fit - mean) / scale).astype(np.float32))
    y = torch.from_numpy(rows.astype(np.float32))
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimiser = torch.optim.Adam(net.parameters(), lr=3e-3)
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), 8192):
            batch = order[start:start + 8192]
            eta = net(x[batch]).squeeze(1)
            loss = (torch.exp(eta) - y[batch] * eta).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        log.info("mlp epoch %d/%d: Poisson loss %.4f", epoch + 1, epochs, float(loss.detach()))
    with torch.no_grad():
        applied = torch.from_numpy(((x_apply - mean) / scale).astype(np.float32))
        return net(applied).squeeze(1).numpy().astype(np.float64)


def in_sample(learner, candidates: pd.DataFrame, x: np.ndarray) -> np.ndarray:
    """Scores of ``candidates`` (rows ``x``) by ``learner`` fitted on their own future ``rows``,
    out of fold: each half of the users (a hash of the id) by a fit on the other half."""
    half = pd.util.hash_array(candidates["user_id"].to_numpy()) % 2
    rows = candidates["rows"].to_numpy(np.float64)
    score = np.zeros(len(candidates))
    for fold in (0, 1):
        held = half == fold
        score[held] = learner(x[~held], rows[~held], x[held])
    return score


def replay(train, candidates, budgets, features, interact, cap) -> tuple[dict, list[float]]:
    """Coverage of a numpy refit with ``features`` + ``interact`` products (global selection:
    one user at most ``cap`` x the budget), and its weights."""
    model = fit_rows(design(train, features, interact), train["rows"].to_numpy(np.float64))
    score = model.logit(design(candidates, features, interact))
    return coverage(candidates, score, budgets, cap), [round(float(b), 3) for b in model.weights]


def references(train, candidates, budgets, features, cap, args) -> dict:
    """The ``--in-sample`` and ``--mlp`` figures (coverage dicts by name)."""
    if not (args.mlp or args.in_sample):
        return {}
    x = design(candidates, features, [])
    scores = {}
    if args.mlp:
        scores["mlp"] = mlp_scores(design(train, features, []), train["rows"].to_numpy(np.float64), x)
    if args.in_sample:
        scores["floor_in_sample"] = in_sample(logistic_scores, candidates, x)
    if args.in_sample and args.mlp:
        scores["mlp_in_sample"] = in_sample(mlp_scores, candidates, x)
    return {name: coverage(candidates, score, budgets, cap) for name, score in scores.items()}


def main(argv: list[str] | None = None) -> int:
    from solaris_lib.speculation.evaluate import GLOBAL_USER_CAP

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="folder given to --dump-candidates")
    parser.add_argument("--interact", action="append", default=[], metavar="A:B",
                        help="add the product of features A and B (repeatable)")
    parser.add_argument("--drop", action="append", default=[], metavar="F",
                        help="leave feature F out (repeatable)")
    parser.add_argument("--user-cap", type=int, default=GLOBAL_USER_CAP, metavar="X",
                        help="in the global selection one user keeps at most X x the budget "
                        f"(default {GLOBAL_USER_CAP}, as speculation-eval --allocation global)")
    parser.add_argument("--in-sample", action="store_true",
                        help="also fit on the scored candidates' own future rows, out of fold "
                        "by user halves (floor_in_sample; mlp_in_sample with --mlp)")
    parser.add_argument("--mlp", action="store_true",
                        help="also a Poisson MLP on the same features (mlp; needs torch)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    interact = [tuple(pair.split(":", 1)) for pair in args.interact]
    unknown = {f for pair in interact for f in pair} | set(args.drop)
    if unknown - set(FEATURES) or any(len(pair) != 2 for pair in interact):
        raise SystemExit(f"scorer_replay: unknown features {sorted(unknown - set(FEATURES))}; "
                         f"known: {', '.join(FEATURES)}")
    started = time.monotonic()
    train, candidates, budgets = load(Path(args.dump))
    log.info("loaded %d training and %d scored candidates (%d future rows) in %.1f s",
             len(train), len(candidates), budgets["denominator"], time.monotonic() - started)
    features = list(FEATURES)
    variant = [f for f in features if f not in args.drop]
    cap = args.user_cap
    floor, floor_weights = replay(train, candidates, budgets, features, [], cap)
    result = {
        "spark": coverage(candidates, candidates["score"].to_numpy(np.float64), budgets, cap),
        "floor": floor,
        "perfect": coverage(candidates, candidates["rows"].to_numpy(np.float64), budgets, cap),
        "floor_weights": dict(zip(features, floor_weights, strict=True)),
    }
    if args.interact or args.drop:
        result["variant"], weights = replay(train, candidates, budgets, variant, interact, cap)
        names = variant + [f"{a}*{b}" for a, b in interact]
        result["variant_weights"] = dict(zip(names, weights, strict=True))
        for mode in ("per_user", "global"):
            result[f"ratio_{mode}"] = round(result["variant"][mode] / result["floor"][mode], 4)
    result.update({"candidates": len(candidates), "train_candidates": len(train),
                   "budget_per_user": budgets["budget_per_user"], "user_cap": cap,
                   "interact": args.interact, "drop": args.drop})
    result.update(references(train, candidates, budgets, features, cap, args))
    result["seconds"] = round(time.monotonic() - started, 1)
    for name in ("spark", "floor", "variant", "floor_in_sample", "mlp", "mlp_in_sample",
                 "perfect"):
        if name in result:
            log.info("%-8s per user %.4f  global %.4f", name, result[name]["per_user"],
                     result[name]["global"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
