"""Upper bound of speculation coverage on a simulated world: the Bayes ceiling at a per-user budget.

Any predictor that sees only the logs before the cutoff knows less than the simulator's full
state at the cutoff (every user's latent interest, every campaign's vector, popularity and
schedule). This script replays the world up to the cutoff, then draws ``--replicas`` independent
futures of the horizon from that state (other seeds: interest drift, who comes when, which
candidates are drawn), averages them into the expected future rows of every (user, item) pair,
keeps each known user's ``budget`` pairs with the largest expectation, and measures the
request-weighted coverage of that choice on the world's actual future: the same denominator as
``solaris speculation-eval`` (future rows of users seen in ``[cutoff - lookback, cutoff)``).
With few replicas the estimate of the expectation is noisy, so the figure is printed after each
doubling of replicas: it rises towards the ceiling.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", required=True)
    parser.add_argument("--cutoff", required=True)
    parser.add_argument("--horizon", default="7d")
    parser.add_argument("--lookback", default="28d")
    parser.add_argument("--budget-factor", type=float, default=3.0)
    parser.add_argument("--replicas", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    cfg = load_world_config(args.logs)
    if cfg is None:
        raise SystemExit(f"{args.logs} is not a simulated world (no _world/config.json)")
    cutoff, horizon = parse_timestamp(args.cutoff), parse_duration(args.horizon)
    lookback = parse_duration(args.lookback)
    first_day = int((cutoff - cfg.start).total_seconds() // 86400)
    days = int(np.ceil(horizon.total_seconds() / 86400))
    if (cutoff - cfg.start) % timedelta(days=1) or first_day < 1:
        raise SystemExit("the cutoff must be a UTC midnight after the world's first day")
    sim = Simulator(cfg)
    for day in range(first_day):
        for _ in sim.day(day):
            pass
    known = np.unique(_rows(args.logs, cutoff - lookback, cutoff)[0])
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
    figures = {}
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
            top = np.argpartition(-expected, budget - 1, axis=1)[:, :budget]
            figures[done] = round(float(np.take_along_axis(actual, top, 1).sum() / actual.sum()), 4)
            print(f"replicas {done}: ceiling coverage {figures[done]}", flush=True)
    print(json.dumps({
        "benchmark": "speculation_ceiling", "logs": args.logs, "cutoff": cutoff.isoformat(),
        "horizon_s": horizon.total_seconds(), "budget_per_user": budget,
        "mean_future_pairs_per_user": round(float(pairs[pairs > 0].mean()), 1),
        "known_users": int(known.size), "future_rows_known": int(actual.sum()),
        "ceiling_coverage_by_replicas": figures, "seconds": round(time.perf_counter() - started, 1),
    }))


if __name__ == "__main__":
    main()
