"""One hour of requests: who comes, which K candidates the upstream retrieval scores, the ranker's
display, and the ground-truth clicks.

Candidates mix three sources, as production retrieval does: the user's interests (a Gumbel top-k
draw from the user's interest pool, so repeats are likely but not certain), popularity (draws
proportional to campaign popularity) and exploration (uniform over live campaigns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solaris_lib.errors import SolarisError
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.entities import Items


def hourly_rhythm(hour_of_day: np.ndarray | int) -> np.ndarray:
    """Relative request rate by UTC hour: peak at 20:00, trough at 08:00, mean 1."""
    return 1.0 + 0.5 * np.cos(2 * np.pi * (np.asarray(hour_of_day) - 20) / 24)


@dataclass(frozen=True)
class DayPools:
    """Each active user's interest pool for one day.

    ``pool[r]`` holds item indices (into :class:`Items`), ``affinity[r]`` their dot products with
    the user's interest.  Shapes ``(active_users, P)``.
    """

    row_of_user: dict[int, int]
    pool: np.ndarray
    affinity: np.ndarray


def build_pools(
    cfg: WorldConfig, interest: np.ndarray, users: np.ndarray, items: Items, live: np.ndarray
) -> DayPools:
    """Top-P live campaigns by affinity (plus a mild popularity bias) for each user in ``users``."""
    size = min(cfg.interest_pool, live.size)
    vectors = items.vector[live]
    bias = 0.05 * np.log(items.popularity[live]).astype(np.float32)
    pools, affinities = [], []
    for chunk in np.array_split(users, max(1, users.size // 2048)):
        affinity = interest[chunk] @ vectors.T  # (c, L)
        top = _top_columns(affinity + bias, size)
        pools.append(live[top])
        affinities.append(np.take_along_axis(affinity, top, axis=1))
    return DayPools(
        row_of_user={int(u): r for r, u in enumerate(users)},
        pool=np.concatenate(pools) if pools else np.empty((0, size), np.int64),
        affinity=np.concatenate(affinities) if affinities else np.empty((0, size), np.float32),
    )


def _gumbel_top_k(logits: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Column indices of k draws without replacement per row, proportional to softmax(logits)."""
    noisy = logits + rng.gumbel(size=logits.shape)
    return _top_columns(noisy, k)


def _top_columns(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, the column indices of the ``k`` largest scores, in column order. (R, C) ->
    (R, k). ``argpartition`` alone returns them in an order numpy leaves unspecified (it
    differs with the CPU's SIMD extensions), which would make the world depend on the machine."""
    return np.sort(np.argpartition(-scores, k - 1, axis=1)[:, :k], axis=1)


def _first_unique(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the first ``k`` distinct values in column order.  Returns (values (R,k), ok (R,))."""
    order = np.argsort(matrix, axis=1, kind="stable")
    ordered = np.take_along_axis(matrix, order, axis=1)
    repeat = np.zeros(matrix.shape, bool)
    rows = np.arange(matrix.shape[0])[:, None]
    repeat[rows, order[:, 1:]] = ordered[:, 1:] == ordered[:, :-1]
    keep = ~repeat & (matrix >= 0)
    rank = np.cumsum(keep, axis=1)
    ok = rank[:, -1] >= k
    chosen = keep & (rank <= k)
    values = np.full((matrix.shape[0], k), -1, dtype=matrix.dtype)
    r, c = np.nonzero(chosen)
    values[r, rank[r, c] - 1] = matrix[r, c]
    return values, ok


def delivery_weight(cfg: WorldConfig, items: Items, hour: int) -> np.ndarray:
    """Pacing of every campaign at ``hour``: 0 when not live, ramping up to 1 after launch."""
    age = hour - items.start_hour
    live = (age >= 0) & (items.end_hour > hour)
    ramp = np.clip((age + 1) / max(cfg.ramp_up_hours, 1.0), 0.0, 1.0)
    return np.where(live, ramp, 0.0)


def draw_candidates(
    cfg: WorldConfig,
    pools: DayPools,
    request_rows: np.ndarray,
    items: Items,
    hour: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """K distinct live item indices per request.  ``request_rows``: pool rows (R,) -> (R, K)."""
    k = cfg.candidates_per_request
    n_interest = min(round(k * cfg.mix_interest), pools.pool.shape[1])
    n_popular = round(k * cfg.mix_popular)
    delivery = delivery_weight(cfg, items, hour)
    live = np.flatnonzero(delivery > 0)
    if live.size < k:
        raise SolarisError(
            f"only {live.size} campaigns are live at hour {hour}, fewer than the {k} candidates "
            "a request scores: simulate a larger catalogue (--items)"
        )
    pool = pools.pool[request_rows]
    with np.errstate(divide="ignore"):
        logits = (
            cfg.interest_temperature * pools.affinity[request_rows]
            + np.log(delivery[pool])
            + cfg.interest_popularity_power * np.log(items.popularity[pool])
        )
    columns = _gumbel_top_k(logits, n_interest, rng)
    picked = np.take_along_axis(pool, columns, axis=1)
    picked = np.where(np.isfinite(np.take_along_axis(logits, columns, axis=1)), picked, -1)
    weights = items.popularity[live] * delivery[live]
    weights /= weights.sum()
    popular = live[rng.choice(live.size, (len(request_rows), n_popular + 12), p=weights)]
    explore = live[rng.integers(0, live.size, (len(request_rows), k - n_interest - n_popular + 12))]
    values, ok = _first_unique(np.concatenate([picked, popular, explore], axis=1), k)
    while not ok.all():
        extra = live[rng.integers(0, live.size, (int((~ok).sum()), 2 * k))]
        values[~ok], ok[~ok] = _first_unique(np.concatenate([values[~ok], extra], axis=1), k)
    return values


def click_logits(
    cfg: WorldConfig, interest: np.ndarray, excitation: np.ndarray, items: Items, cand: np.ndarray
) -> np.ndarray:
    """Ground-truth click logit of each candidate.  interest (R, d), excitation (R, C) -> (R, K)."""
    affinity = np.einsum("rd,rkd->rk", interest, items.vector[cand])
    boost = np.take_along_axis(excitation, items.category[cand].astype(np.int64), axis=1)
    return (
        cfg.click_base_logit
        + cfg.click_affinity * affinity
        + cfg.click_quality * items.quality[cand]
        + cfg.click_excitation * (1.0 - np.exp(-boost))
    )


def rank_and_click(
    cfg: WorldConfig, logits: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ranker shows its top S (a noisy view of the truth); shown items are clicked or not.

    Returns (position (R,K) int32 with -1 for not shown, clicked (R,K) bool, p_click (R,K)).
    """
    p_click = 1.0 / (1.0 + np.exp(-logits))
    ranker = logits + rng.normal(0.0, 0.7, logits.shape)
    order = np.argsort(-ranker, axis=1, kind="stable")
    position = np.full(logits.shape, -1, np.int32)
    rows = np.arange(logits.shape[0])[:, None]
    shown = order[:, : cfg.shown_per_request]
    position[rows, shown] = np.arange(cfg.shown_per_request, dtype=np.int32)[None, :]
    clicked = (position >= 0) & (rng.random(logits.shape) < p_click)
    return position, clicked, p_click.astype(np.float32)
