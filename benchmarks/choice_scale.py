"""The choice model beyond ``choice_full_items``: time per step and recovered tastes, the sampled
softmax against the full one on the same pairs, then planted worlds of 200k and 1M items.

A planted world (numpy, no Spark): ``--groups`` taste groups; item ``j`` belongs to group
``j % groups`` and has a Zipf-like popularity within it; each user belongs to one group and
draws ``--own-share`` of their rows from it (by popularity), the rest from the whole catalogue.
A fifth of each user's rows is held out. The fit is ``speculation.choice.fit_choice``, the one
the retrieval job runs (its collection of the pairs from Spark is not timed here), with the
shipped settings (``RetrievalConfig`` defaults: 16 dimensions, 300 Adam steps, 4,096 negatives
per step); only ``choice_full_items`` is set, to force one softmax or the other.

Quality, on held-out rows (what the scorer's ``choice`` feature, ``x_u . y_j + b_j``, is for):

* ``pairwise_accuracy``: a held-out item of the user's own group against a random item of
  another group, the share ranked right by ``x_u . y_j`` (0.5: chance);
* ``recall_at_100``: of held-out rows of up to 200 users, the share whose item is among the
  user's 100 best items by ``x_u . y_j + b_j`` (the model's own ranking; train items excluded).
  The reference beside it, ``popularity_recall_at_100``, ranks by the catalogue's train rows.

Last line: ``{"runs": [...], "sampled_vs_full": {...}}``; ``time_ratio`` is the sampled fit's
seconds over the full fit's on the same pairs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import numpy as np

logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
log = logging.getLogger("choice_scale")


def planted(n_users: int, n_items: int, rows_per_user: int, groups: int, own_share: float,
            seed: int):
    """(train (users, items, weight), held-out (users, items), user group (U,), item group (I,))
    with item ids already the catalogue's rows (items without a train row are dropped)."""
    rng = np.random.default_rng(seed)
    item_group = np.arange(n_items) % groups
    within = np.arange(n_items) // groups  # rank of the item inside its group
    popularity = 1.0 / (within + 10.0)
    by_group = [np.flatnonzero(item_group == g) for g in range(groups)]
    group_p = [popularity[ids] / popularity[ids].sum() for ids in by_group]
    all_p = popularity / popularity.sum()
    user_group = rng.integers(0, groups, n_users)
    counts = np.maximum(1, rng.lognormal(np.log(rows_per_user) - 0.5, 1.0, n_users).astype(int))
    users, items = [], []
    for u in range(n_users):
        own = rng.random(counts[u]) < own_share
        g = user_group[u]
        drawn = np.where(own, by_group[g][rng.choice(len(by_group[g]), counts[u], p=group_p[g])],
                         rng.choice(n_items, counts[u], p=all_p))
        users.append(np.full(counts[u], u))
        items.append(drawn)
    users, items = np.concatenate(users), np.concatenate(items)
    held = rng.random(len(users)) < 0.2
    pairs, weight = np.unique(np.stack([users[~held], items[~held]]), axis=1, return_counts=True)
    catalogue, columns = np.unique(pairs[1], return_inverse=True)
    remap = np.full(n_items, -1)
    remap[catalogue] = np.arange(len(catalogue))
    test_items = remap[items[held]]
    keep = test_items >= 0
    return ((pairs[0], columns, weight.astype(np.float64)), (users[held][keep], test_items[keep]),
            user_group, item_group[catalogue])


def quality(x, y, b, train, test, user_group, item_group, seed: int) -> dict[str, float]:
    """Pairwise accuracy and recall@100 on the held-out rows (module docstring)."""
    rng = np.random.default_rng(seed)
    test_users, test_items = test
    picks = rng.choice(len(test_users), min(100_000, len(test_users)), replace=False)
    u, own = test_users[picks], test_items[picks]
    own_group = item_group[own] == user_group[u]
    u, own = u[own_group], own[own_group]
    other = rng.integers(0, len(item_group), len(u))
    valid = item_group[other] != user_group[u]
    u, own, other = u[valid], own[valid], other[valid]
    accuracy = float(np.mean(np.einsum("nd,nd->n", x[u], y[own])
                             > np.einsum("nd,nd->n", x[u], y[other])))
    train_rows = np.bincount(train[1], weights=train[2], minlength=len(y))
    users = np.unique(test_users)
    hits, pop_hits, total = 0, 0, 0
    for user in rng.choice(users, min(200, len(users)), replace=False):
        seen = train[1][train[0] == user]
        wanted = test_items[test_users == user]
        hits += _found(x[user] @ y.T + b, seen, wanted)
        pop_hits += _found(train_rows.copy(), seen, wanted)
        total += len(wanted)
    return {"pairwise_accuracy": round(accuracy, 4), "recall_at_100": round(hits / total, 4),
            "popularity_recall_at_100": round(pop_hits / total, 4)}


def _found(scores: np.ndarray, seen: np.ndarray, wanted: np.ndarray, k: int = 100) -> int:
    """How many of ``wanted`` are among the ``k`` best ``scores`` once ``seen`` are excluded
    (``scores`` is overwritten)."""
    scores[seen] = -np.inf
    return int(np.isin(wanted, np.argpartition(-scores, k)[:k]).sum())


def fit(train, shape, full_items: int, seed: int):
    """(x, y, b, seconds, steps) of the shipped fit with ``choice_full_items`` = ``full_items``."""
    from solaris_lib.speculation.choice import fit_choice
    from solaris_lib.speculation.config import RetrievalConfig

    config = RetrievalConfig(choice_full_items=full_items, seed=seed)
    started = time.perf_counter()
    x, y, b = fit_choice(*train, shape, config)
    return x, y, b, time.perf_counter() - started, config.choice_steps


def run(n_items: int, args, softmax: str) -> dict:
    """One fit on a planted world of ``n_items`` items; its figures."""
    rows = max(args.rows_per_user, 2 * n_items // args.users)
    train, test, user_group, item_group = planted(args.users, n_items, rows, args.groups,
                                                  args.own_share, args.seed)
    shape = (args.users, len(item_group))
    full_items = shape[1] if softmax == "full" else 1
    x, y, b, seconds, steps = fit(train, shape, full_items, args.seed)
    figures = {"items": n_items, "catalogue": shape[1], "users": args.users,
               "pairs": int(len(train[2])), "softmax": softmax, "seconds": round(seconds, 2),
               "s_per_step": round(seconds / steps, 4),
               **quality(x, y, b, train, test, user_group, item_group, args.seed)}
    print(json.dumps(figures), file=sys.stderr, flush=True)
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--rows-per-user", type=int, default=100,
                        help="mean rows per user (at least 2 x items / users)")
    parser.add_argument("--groups", type=int, default=40)
    parser.add_argument("--own-share", type=float, default=0.7)
    parser.add_argument("--compare-items", type=int, default=10_000,
                        help="catalogue of the full-vs-sampled comparison")
    parser.add_argument("--scale-items", default="200000,1000000",
                        help="catalogues fitted with the sampled softmax only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    full = run(args.compare_items, args, "full")
    sampled = run(args.compare_items, args, "sampled")
    runs = [full, sampled] + [run(int(n), args, "sampled") for n in args.scale_items.split(",") if n]
    print(json.dumps({"runs": runs, "sampled_vs_full": {
        "items": args.compare_items, "time_ratio": round(sampled["seconds"] / max(full["seconds"], 0.01), 3),
        "accuracy_delta": round(sampled["pairwise_accuracy"] - full["pairwise_accuracy"], 4),
        "recall_delta": round(sampled["recall_at_100"] - full["recall_at_100"], 4)}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
