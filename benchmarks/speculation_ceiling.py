"""Upper bound of speculation coverage on a simulated world: the Bayes ceiling at a budget.

Any predictor that sees only the logs before the cutoff knows less than the simulator's full
state at the cutoff (every user's latent interest, every campaign's vector, popularity and
schedule). This script replays the world up to the cutoff, then draws ``--replicas`` independent
futures of the horizon from that state (other seeds: interest drift, who comes when, which
candidates are drawn) and averages them into the expected future rows of every (user, item)
pair. It keeps the pairs with the largest expectation under two allocations of the same total:
``per_user`` (each known user's ``budget`` best) and ``global`` (the ``budget x known users``
best across users, one user at most ``--max-per-user-factor x budget``, as
``speculation-eval --allocation global``), each choosing among every item (``per_user``,
``global``: includes campaigns launched during the horizon, which no log can name) or among the
items seen before the cutoff only (``*_seen_items``: the ceiling of a log-based predictor). It
measures the request-weighted coverage of each choice on the world's actual future: the same
denominator as ``solaris speculation-eval`` (future rows of users seen in
``[cutoff - lookback, cutoff)``). With few replicas the estimate of the expectation is noisy,
so the figures are printed after each doubling of replicas: they rise towards the ceiling.

Usage: ``.venv/bin/python benchmarks/speculation_ceiling.py --logs var/world --cutoff 2026-01-12
--horizon 7d --budget-factor 3 --replicas 8``. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from datetime import timedelta

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds

from solaris_lib.intervals import parse_duration, parse_timestamp
from solaris_lib.simulate.world import Simulator, load_world_config


def _rows(logs: str, start, end) -> tuple[np.ndarray, np.ndarray]:
    """(user_id, item_id) of the log rows with ``start <= ts < end``."""
    table = ds.dataset(logs, format="parquet", partitioning="hive",
                       exclude_invalid_files=True).to_table(columns=["user_id", "item_id", "ts"])
    ts = table.column("ts")
    keep = pc.and_(pc.greater_equal(ts, pc.cast(start, ts.type)), pc.less(ts, pc.cast(end, ts.type)))
    table = table.filter(keep)
    return table.column("user_id").to_numpy(), table.column("item_id").to_numpy()


def _count(matrix, users, items, user_row, item_col) -> None:
    np.add.at(matrix, (user_row(users), item_col(items)), 1.0)


def per_user_choice(expected: np.ndarray, actual: np.ndarray, budget: int) -> float:
    """Actual rows of each user's ``budget`` pairs with the most expected rows.  (U, I) -> rows."""
    top = np.argpartition(-expected, budget - 1, axis=1)[:, :budget]
    return float(np.take_along_axis(actual, top, 1).sum())


def global_choice(expected: np.ndarray, actual: np.ndarray, budget: int, cap: int) -> float:
    """Actual rows of the ``budget x users`` pairs with the most expected rows across users, one
    user keeping at most ``cap`` (``speculation-eval --allocation global``).  (U, I) -> rows."""
    cap = min(cap, expected.shape[1])
    top = np.argpartition(-expected, cap - 1, axis=1)[:, :cap]
    values = np.take_along_axis(expected, top, 1).ravel()
    total = min(budget * expected.shape[0], values.size)
    chosen = np.argpartition(-values, total - 1)[:total]
    return float(np.take_along_axis(actual, top, 1).ravel()[chosen].sum())


def simulator_at(logs: str, cutoff) -> tuple[Simulator, int]:
    """(the world of ``logs`` replayed up to ``cutoff``, the cutoff's day index): its state is
    the hidden state at the cutoff. The cutoff must be a UTC midnight after the first day."""
    cfg = load_world_config(logs)
    if cfg is None:
        raise SystemExit(f"{logs} is not a simulated world (no _world/config.json)")
    first_day = int((cutoff - cfg.start).total_seconds() // 86400)
    if (cutoff - cfg.start) % timedelta(days=1) or first_day < 1:
        raise SystemExit("the cutoff must be a UTC midnight after the world's first day")
    sim = Simulator(cfg)
    for day in range(first_day):
        for _ in sim.day(day):
            pass
    return sim, first_day


VARIANTS = ("per_user", "global", "per_user_seen_items", "global_seen_items")


def _figures(expected, actual, unseen, budget: int, cap: int) -> dict[str, float]:
    """The four ceilings (see :data:`VARIANTS`): per-user or global allocation, choosing among
    every item or only among items seen before the cutoff (``unseen`` (I,) bool: items a
    log-based predictor cannot name, e.g. launched during the horizon)."""
    # an unseen item can still be picked when a user has too few seen ones: it then covers 0
    seen_expected = np.where(unseen[None, :], -1.0, expected).astype(np.float32)
    seen_actual = np.where(unseen[None, :], 0.0, actual).astype(np.float32)
    total = float(actual.sum())
    return {"per_user": per_user_choice(expected, actual, budget) / total,
            "global": global_choice(expected, actual, budget, cap) / total,
            "per_user_seen_items": per_user_choice(seen_expected, seen_actual, budget) / total,
            "global_seen_items": global_choice(seen_expected, seen_actual, budget, cap) / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", required=True)
    parser.add_argument("--cutoff", required=True)
    parser.add_argument("--horizon", default="7d")
    parser.add_argument("--lookback", default="28d")
    parser.add_argument("--budget-factor", type=float, default=3.0)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--max-per-user-factor", type=int, default=4,
                        help="the global allocation's cap per user, in budgets (as the CLI's)")
    args = parser.parse_args()
    started = time.perf_counter()
    cutoff, horizon = parse_timestamp(args.cutoff), parse_duration(args.horizon)
    lookback = parse_duration(args.lookback)
    sim, first_day = simulator_at(args.logs, cutoff)
    cfg = sim.cfg
    days = int(np.ceil(horizon.total_seconds() / 86400))
    past_users, past_items = _rows(args.logs, cutoff - lookback, cutoff)
    known = np.unique(past_users)
    users, items = _rows(args.logs, cutoff, cutoff + horizon)
    mask = np.isin(users, known)
    users, items = users[mask], items[mask]
    user_pos = {int(u): k for k, u in enumerate(known)}
    item_pos = {int(i): k for k, i in enumerate(sim.items.item_id)}

    def user_row(ids):
        return np.fromiter((user_pos[int(u)] for u in ids), np.int64, len(ids))

    def item_col(ids):
        return np.fromiter((item_pos[int(i)] for i in ids), np.int64, len(ids))

    actual = np.zeros((known.size, sim.items.item_id.size), np.float32)
    _count(actual, users, items, user_row, item_col)
    pairs = (actual > 0).sum(axis=1)
    budget = max(1, round(args.budget_factor * pairs[pairs > 0].mean()))
    expected = np.zeros_like(actual)
    known_set = set(user_pos)
    unseen = ~np.isin(sim.items.item_id, past_items)  # launched after the cutoff (or silent)
    figures = {name: {} for name in VARIANTS}
    for replica in range(args.replicas):
        future = copy.deepcopy(sim)
        future.cfg = cfg.model_copy(update={"seed": 1_000_003 + replica})
        for day in range(first_day, first_day + days):
            for hour, table in future.day(day):
                if hour >= cutoff + horizon:
                    break
                u, i = table.column("user_id").to_numpy(), table.column("item_id").to_numpy()
                keep = np.fromiter((int(x) in known_set for x in u), bool, len(u))
                _count(expected, u[keep], i[keep], user_row, item_col)
        done = replica + 1
        if done & (done - 1) == 0 or done == args.replicas:
            for name, value in _figures(expected, actual, unseen, budget,
                                        args.max_per_user_factor * budget).items():
                figures[name][done] = round(value, 4)
            print(f"replicas {done}: " + ", ".join(
                f"{name} {figures[name][done]}" for name in VARIANTS), flush=True)
    print(json.dumps({
        "benchmark": "speculation_ceiling", "logs": args.logs, "cutoff": cutoff.isoformat(),
        "horizon_s": horizon.total_seconds(), "budget_per_user": budget,
        "mean_future_pairs_per_user": round(float(pairs[pairs > 0].mean()), 1),
        "known_users": int(known.size), "future_rows_known": int(actual.sum()),
        "unseen_item_rows": round(float(actual[:, unseen].sum() / actual.sum()), 4),
        "ceiling_coverage_by_replicas": figures, "seconds": round(time.perf_counter() - started, 1),
    }))


if __name__ == "__main__":
    main()
