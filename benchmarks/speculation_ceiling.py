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

``--interest estimated`` replaces every user's hidden interest by its estimate from the logs
before the futures are drawn (:func:`estimate_interests`: a penalised fit of a simplified
likelihood under the campaigns' true vectors, pacing and popularity and the simulator's
candidate mix, rows weighted ``2^(-age / --interest-half-life)``); the median cosine of the
estimates with the true interests is reported (``interest_cosine``). ``--ends drawn`` hides the
other fact no log holds, when each campaign will end: every replica draws the lifetime of each
campaign live at the cutoff from the simulator's own law given the time it has run
(:func:`_draw_ends`), while the actual future keeps the true ends. With both, the figures are
those of a predictor that knows the simulator's laws and everything else of its state and
estimates these two facts: not a strict bound for readers of the logs (a better estimate of
the interests could do better), but a reference far better informed than any log.

``--compare DUMP`` (a ``speculation-eval --dump-candidates`` folder of the same world, cutoff,
horizon and budget, per-user allocation) also says where the run falls short of the ceiling
(``gap``): each known user keeps the run's ``budget_per_user`` best candidates by the run's score
(ties: smaller item id, as the replay) and the ceiling's ``per_user_seen_items`` pairs; the rows
each keeps and the other does not are split by the user's activity decile (the run's
``user_act``, decile 9 the most active) and by pair kind (``repeat``: a candidate the user was
scored on in the history; ``new``: any other pair), with the rows on pairs only the ceiling keeps
(``ceiling_only``; ``ceiling_only_outside_pools``: of those, on pairs the run never proposed,
which no scorer could pick) and only the run keeps (``run_only``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from datetime import timedelta

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds

from solaris_lib.intervals import parse_duration, parse_timestamp
from solaris_lib.simulate.entities import (
    MIN_LIFETIME_HOURS,
    clip_lifetimes,
    raw_lifetimes_hours,
)
from solaris_lib.simulate.requests import delivery_weight
from solaris_lib.simulate.world import Simulator, load_world_config


def _rows(logs: str, start, end) -> tuple[np.ndarray, np.ndarray]:
    """(user_id, item_id) of the log rows with ``start <= ts < end``."""
    table = ds.dataset(logs, format="parquet", partitioning="hive",
                       exclude_invalid_files=True).to_table(columns=["user_id", "item_id", "ts"])
    ts = table.column("ts")
    keep = pc.and_(pc.greater_equal(ts, pc.cast(start, ts.type)), pc.less(ts, pc.cast(end, ts.type)))
    table = table.filter(keep)
    return table.column("user_id").to_numpy(), table.column("item_id").to_numpy()


def estimate_interests(sim: Simulator, logs: str, cutoff, half_life_h: float,
                       steps: int = 200) -> tuple[np.ndarray, float]:
    """Each user's interest (U, d) unit rows, estimated from the rows before ``cutoff`` (users
    without rows keep a zero vector), and the median cosine with the true interests.

    The likelihood of a row's item j simplifies the simulator's candidate mix to one draw at
    the last hour before the cutoff: ``mix_interest softmax_j(x . v_j + log delivery_j + power
    log popularity_j) + mix_popular share_j + mix_explore / live``, over the campaigns live
    then, with ``x`` free (its norm takes the temperature). Left out: the pool of each user's
    top campaigns and the draws without replacement from it, each row's own hour (pacing,
    campaigns ended since: their rows are dropped) and the clicks. Rows weighted by
    ``2^(-age / half_life_h)``, a small L2 on x, ``steps`` full-batch Adam steps."""
    import torch

    cfg, items = sim.cfg, sim.items
    table = ds.dataset(logs, format="parquet", partitioning="hive", exclude_invalid_files=True
                       ).to_table(columns=["user_id", "item_id", "ts"])
    ts = table.column("ts")
    table = table.filter(pc.less(ts, pc.cast(cutoff, ts.type)))
    age_h = (np.datetime64(cutoff.replace(tzinfo=None), "us")
             - table.column("ts").to_numpy().astype("datetime64[us]")) / np.timedelta64(1, "h")
    hour = int((cutoff - cfg.start).total_seconds() // 3600) - 1
    delivery = delivery_weight(cfg, items, hour)
    live = np.flatnonzero(delivery > 0)
    column = np.full(items.item_id.size, -1)
    column[live] = np.arange(live.size)
    col = column[_positions(items.item_id, table.column("item_id").to_numpy())]
    row = _positions(sim.users.user_id, table.column("user_id").to_numpy())
    keep = col >= 0
    cells = row[keep] * live.size + col[keep]
    weight = np.exp2(-age_h[keep] / half_life_h)
    cells, inverse = np.unique(cells, return_inverse=True)
    weight = np.bincount(inverse, weights=weight)
    users, cols = cells // live.size, cells % live.size
    share = items.popularity[live] * delivery[live]
    floor = torch.as_tensor(np.log(cfg.mix_popular * share / share.sum()
                                   + cfg.mix_explore / live.size), dtype=torch.float32)
    bias = torch.as_tensor(np.log(delivery[live]) + cfg.interest_popularity_power
                           * np.log(items.popularity[live]), dtype=torch.float32)
    vectors = torch.as_tensor(items.vector[live], dtype=torch.float32)
    present, rows = np.unique(users, return_inverse=True)
    x = torch.zeros(present.size, vectors.shape[1], requires_grad=True)
    w = torch.as_tensor(weight / weight.sum(), dtype=torch.float32)
    rows_t, cols_t = torch.as_tensor(rows), torch.as_tensor(cols)
    optimiser = torch.optim.Adam([x], lr=0.1)
    for _ in range(steps):
        optimiser.zero_grad()
        interest = torch.log_softmax(x @ vectors.T + bias, 1) + float(np.log(cfg.mix_interest))
        mixed = torch.logaddexp(interest, floor)[rows_t, cols_t]
        loss = -(w * mixed).sum() + 0.01 * x.pow(2).sum(1).mean()
        loss.backward()
        optimiser.step()
    estimate = np.zeros_like(sim.users.interest)
    found = x.detach().numpy()
    estimate[present] = found / np.linalg.norm(found, axis=1, keepdims=True).clip(1e-12)
    cosine = np.einsum("ud,ud->u", estimate[present], sim.users.interest[present])
    return estimate.astype(np.float32), float(np.median(cosine))


def _positions(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of each of ``values`` in ``ids`` (unsorted, unique; every value present)."""
    order = np.argsort(ids)
    return order[np.searchsorted(ids, values, sorter=order)]


def _count(matrix, users, items, user_row, item_col) -> None:
    np.add.at(matrix, (user_row(users), item_col(items)), 1.0)


def per_user_top(expected: np.ndarray, budget: int) -> np.ndarray:
    """(U, budget) column indices of each user's pairs with the most expected rows; ties (the
    replicas' counts tie often) go to the lower column, the same on every CPU (argpartition
    picks among ties by its SIMD kernel)."""
    return np.argsort(-expected, axis=1, kind="stable")[:, :budget]


def per_user_choice(expected: np.ndarray, actual: np.ndarray, budget: int) -> float:
    """Actual rows of each user's ``budget`` pairs with the most expected rows.  (U, I) -> rows."""
    return float(np.take_along_axis(actual, per_user_top(expected, budget), 1).sum())


def seen_only(expected: np.ndarray, actual: np.ndarray, unseen: np.ndarray):
    """(expected, actual) for a choice among seen items only: an unseen item ((I,) bool) can
    still be picked when a user has too few seen ones, and then covers 0."""
    return (np.where(unseen[None, :], -1.0, expected).astype(np.float32),
            np.where(unseen[None, :], 0.0, actual).astype(np.float32))


def global_choice(expected: np.ndarray, actual: np.ndarray, budget: int, cap: int) -> float:
    """Actual rows of the ``budget x users`` pairs with the most expected rows across users, one
    user keeping at most ``cap`` (``speculation-eval --allocation global``).  (U, I) -> rows."""
    cap = min(cap, expected.shape[1])
    top = per_user_top(expected, cap)
    values = np.take_along_axis(expected, top, 1).ravel()
    total = min(budget * expected.shape[0], values.size)
    chosen = np.argsort(-values, kind="stable")[:total]
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


def _future(sim: Simulator, replica: int, first_day: int, days: int, end,
            draw_ends: bool = False):
    """Yield the log table of each hour before ``end`` of one independent future of ``sim``
    (``days`` days from ``first_day``, the replica's own seed); ``draw_ends``: the campaigns live
    at the cutoff end when the replica draws (:func:`_draw_ends`), not when they really do."""
    future = copy.deepcopy(sim)
    future.cfg = sim.cfg.model_copy(update={"seed": 1_000_003 + replica})
    if draw_ends:
        _draw_ends(future, first_day * 24, np.random.default_rng([0xE4D, replica]))
    for day in range(first_day, first_day + days):
        for hour, table in future.day(day):
            if hour >= end:
                return
            yield table


def _draw_ends(sim: Simulator, hour: int, rng: np.random.Generator) -> None:
    """In place: each campaign started before ``hour`` and live then gets a lifetime drawn from
    the simulator's law given that it has run ``age`` hours: its exponential draw is memoryless
    beyond the minimum lifetime (``age + 1/2 +`` a fresh draw, rounded), and the clip to
    ``[MIN_LIFETIME_HOURS, MAX_LIFETIME_HOURS]`` still holds, so a campaign near the maximum
    ends when the maximum says."""
    items = sim.items
    live = np.flatnonzero((items.start_hour < hour) & (items.end_hour > hour))
    age = hour - items.start_hour[live]
    raw = raw_lifetimes_hours(sim.cfg, items.popularity, rng)[live]  # the catalogue's law
    lifetime = clip_lifetimes(np.where(age >= MIN_LIFETIME_HOURS, age + 0.5 + raw, raw))
    ends = items.end_hour.copy()
    ends[live] = items.start_hour[live] + np.maximum(lifetime, age + 1)  # live at ``hour``
    sim.items = dataclasses.replace(items, end_hour=ends)


def run_selection(candidates, budget: int):
    """The run's per-user selection of a dump's ``candidates`` (``user_id``, ``item_id``,
    ``score``) by the product's rule (:func:`selection.select`): what a run keeps when every
    candidate is scored (the learned or the heuristic ranking, no ``--max-per-user``); a
    single-source ranking's dump holds its own pairs only."""
    from solaris_lib.speculation.selection import Budget, select

    return candidates[select(candidates["user_id"].to_numpy(np.int64),
                             candidates["item_id"].to_numpy(np.int64),
                             candidates["score"].to_numpy(np.float64), Budget(budget))]


def activity_deciles(activity, user_pos: dict, n_users: int) -> np.ndarray:
    """(U,) int: each user's decile by ``activity`` (a Series by user id; 9 the most active,
    equal counts up to one), -1 for users it does not hold (no candidates)."""
    decile = np.full(n_users, -1, np.int64)
    order = activity.rank(method="first").to_numpy().astype(np.int64)  # 1..n
    decile[activity.index.map(user_pos).to_numpy()] = (order - 1) * 10 // max(len(order), 1)
    return decile


def gap(expected, actual, unseen, run, proposed, repeat, decile, budget: int) -> dict:
    """Where a run's per-user selection falls short of the ceiling's (``per_user_seen_items``).

    ``expected``, ``actual``: (U, I) float rows; ``unseen``: (I,) bool; ``run``, ``proposed``,
    ``repeat``: (U, I) bool (the run's kept pairs, its candidates, pairs of the history);
    ``decile``: (U,) int activity decile, -1 for users without candidates. Shares are of all
    future rows of the U users."""
    top = per_user_top(seen_only(expected, actual, unseen)[0], budget)
    ceiling = np.zeros(expected.shape, bool)
    np.put_along_axis(ceiling, top, ~unseen[top], axis=1)  # a user short of seen items
    total = float(actual.sum())
    only_ceiling = actual * (ceiling & ~run)
    only_run = actual * (run & ~ceiling)
    net = only_ceiling - only_run

    def share(values) -> float:
        return round(float(values.sum()) / total, 4)

    by_decile = [{"decile": d, "rows": share(actual[decile == d]),
                  "new": share(net[decile == d][~repeat[decile == d]]),
                  "repeat": share(net[decile == d][repeat[decile == d]])} for d in range(10)]
    return {
        "ceiling": share(actual * ceiling), "run": share(actual * run),
        "shortfall": share(net), "new": share(net[~repeat]), "repeat": share(net[repeat]),
        "ceiling_only": share(only_ceiling),
        "ceiling_only_outside_pools": share(only_ceiling[~proposed]),
        "run_only": share(only_run),
        "users_without_candidates_rows": share(actual[decile < 0]),
        "by_decile": by_decile,
    }


def compare(dump: str, user_pos: dict, item_pos: dict, shape: tuple[int, int], budget: int):
    """(run, proposed, repeat, decile) of a per-user run's dump on the benchmark's (U, I) grid
    (``shape``); refuses a dump of another budget, allocation or world."""
    import json
    from pathlib import Path

    import pandas as pd

    budgets = json.loads((Path(dump) / "budget.json").read_text())
    if budgets.get("global_budget") is not None or budgets["budget_per_user"] != budget:
        raise SystemExit(f"--compare needs a per-user run's dump with budget {budget} (same "
                         f"world and --budget-factor); {dump} has {budgets}")
    columns = ["user_id", "item_id", "score", "pair_n", "user_act"]
    candidates = pd.read_parquet(Path(dump) / "candidates", columns=columns)
    candidates = candidates[candidates["user_id"].isin(user_pos)]
    if not candidates["item_id"].isin(item_pos).all():
        raise SystemExit(f"{dump} holds items this world does not: a dump of another world?")
    grids = {name: np.zeros(shape, bool) for name in ("run", "proposed", "repeat")}

    def cells(frame):
        return frame["user_id"].map(user_pos).to_numpy(), frame["item_id"].map(item_pos).to_numpy()

    grids["proposed"][cells(candidates)] = True
    grids["repeat"][cells(candidates)] = candidates["pair_n"].to_numpy() > 0
    grids["run"][cells(run_selection(candidates, budget))] = True
    decile = activity_deciles(candidates.groupby("user_id")["user_act"].first(), user_pos,
                              shape[0])
    return grids["run"], grids["proposed"], grids["repeat"], decile


def _figures(expected, actual, unseen, budget: int, cap: int) -> dict[str, float]:
    """The four ceilings (see :data:`VARIANTS`): per-user or global allocation, choosing among
    every item or only among items seen before the cutoff (``unseen`` (I,) bool: items a
    log-based predictor cannot name, e.g. launched during the horizon)."""
    seen_expected, seen_actual = seen_only(expected, actual, unseen)
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
    parser.add_argument("--compare", metavar="DUMP",
                        help="a speculation-eval --dump-candidates folder: where it falls short")
    parser.add_argument("--max-per-user-factor", type=int, default=4,
                        help="the global allocation's cap per user, in budgets (as the CLI's)")
    parser.add_argument("--interest", choices=("true", "estimated"), default="true",
                        help="the users' interests the futures start from: the hidden ones, or "
                        "their estimates from the logs (see the module docstring)")
    parser.add_argument("--interest-half-life", type=float, default=24.0,
                        help="hours: the estimate's row weights halve with this age")
    parser.add_argument("--ends", choices=("true", "drawn"), default="true",
                        help="when the campaigns live at the cutoff end in the futures: "
                        "really, or drawn per replica from the simulator's lifetime law")
    args = parser.parse_args()
    started = time.perf_counter()
    cutoff, horizon = parse_timestamp(args.cutoff), parse_duration(args.horizon)
    lookback = parse_duration(args.lookback)
    sim, first_day = simulator_at(args.logs, cutoff)
    extra = {}
    if args.interest == "estimated":
        sim.users.interest, extra["interest_cosine"] = estimate_interests(
            sim, args.logs, cutoff, args.interest_half_life)
        print(f"estimated interests: median cosine {extra['interest_cosine']:.3f}", flush=True)
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
    grids = (compare(args.compare, user_pos, item_pos, actual.shape, budget)
             if args.compare else None)
    for replica in range(args.replicas):
        for table in _future(sim, replica, first_day, days, cutoff + horizon,
                             args.ends == "drawn"):
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
    if grids is not None:
        extra["gap"] = gap(expected / args.replicas, actual, unseen, *grids, budget)
        print("gap: " + json.dumps(extra["gap"]), flush=True)
    print(json.dumps({
        "benchmark": "speculation_ceiling", "logs": args.logs, "cutoff": cutoff.isoformat(),
        "interest": args.interest, "ends": args.ends,
        "horizon_s": horizon.total_seconds(), "budget_per_user": budget,
        "mean_future_pairs_per_user": round(float(pairs[pairs > 0].mean()), 1),
        "known_users": int(known.size), "future_rows_known": int(actual.sum()),
        "unseen_item_rows": round(float(actual[:, unseen].sum() / actual.sum()), 4),
        "ceiling_coverage_by_replicas": figures,
        "seconds": round(time.perf_counter() - started, 1), **extra,
    }))


if __name__ == "__main__":
    main()
