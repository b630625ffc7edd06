"""The static entities of a world: campaigns (items) and users, drawn once from the seed.

Ids are sparse 40-bit integers (an odd-multiplier bijection of the index), as in real logs, so
that no code can mistake an id for an array index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solaris_lib.simulate.config import WorldConfig

_ID_MODULUS = 1 << 40
BURN_IN_DAYS = 120


def sparse_ids(index: np.ndarray, multiplier: int, offset: int) -> np.ndarray:
    """Unique int64 ids from indices: ``(index * multiplier + offset) mod 2**40``, multiplier odd."""
    index = index.astype(np.uint64)
    ids = (index * np.uint64(multiplier) + np.uint64(offset)) % np.uint64(_ID_MODULUS)
    return ids.astype(np.int64)


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm.  (n, d) -> (n, d)."""
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True).clip(1e-9)


@dataclass(frozen=True)
class Items:
    """Every campaign that is live at some point of the world.  Arrays of length ``n``.

    Hours are relative to the world's start (negative: started before day 0).
    """

    item_id: np.ndarray  # (n,) int64
    category: np.ndarray  # (n,) int32
    vector: np.ndarray  # (n, d) float32, unit norm
    popularity: np.ndarray  # (n,) float64, Pareto >= 1
    quality: np.ndarray  # (n,) float32
    start_hour: np.ndarray  # (n,) int64
    end_hour: np.ndarray  # (n,) int64, exclusive

    def live_at(self, hour: int) -> np.ndarray:
        """Indices of campaigns live during ``hour``."""
        return np.flatnonzero((self.start_hour <= hour) & (self.end_hour > hour))


@dataclass
class Users:
    """Users with heavy-tailed activity and slowly drifting interests."""

    user_id: np.ndarray  # (u,) int64
    rate_per_day: np.ndarray  # (u,) float64, mean requests per day
    join_hour: np.ndarray  # (u,) int64, first hour the user may appear
    interest: np.ndarray  # (u, d) float32, unit norm; drifts every day


def category_centroids(cfg: WorldConfig, rng: np.random.Generator) -> np.ndarray:
    """One unit vector per category.  (categories, d)"""
    return unit_rows(rng.standard_normal((cfg.categories, cfg.latent_dim)))


MIN_LIFETIME_HOURS, MAX_LIFETIME_HOURS = 6, BURN_IN_DAYS * 24


def raw_lifetimes_hours(cfg: WorldConfig, popularity: np.ndarray, rng) -> np.ndarray:
    """Campaign lifetimes (n,) float hours before rounding and clipping: exponential, longer for
    popular campaigns (mean ``mean_campaign_days`` over the catalogue: pass the whole
    catalogue's ``popularity``, whose mean sets the scale when ``lifetime_popularity_power >=
    popularity_alpha``)."""
    kappa, alpha = cfg.lifetime_popularity_power, cfg.popularity_alpha
    mean_factor = alpha / (alpha - kappa) if kappa < alpha else float(np.mean(popularity**kappa))
    base_days = cfg.mean_campaign_days / mean_factor
    days = rng.exponential(base_days, popularity.size) * popularity**kappa
    return days * 24


def clip_lifetimes(hours: np.ndarray) -> np.ndarray:
    """Whole hours (n,) int64 in ``[MIN_LIFETIME_HOURS, MAX_LIFETIME_HOURS]``."""
    return np.clip(np.round(hours), MIN_LIFETIME_HOURS, MAX_LIFETIME_HOURS).astype(np.int64)


def lifetimes_hours(cfg: WorldConfig, popularity: np.ndarray, rng) -> np.ndarray:
    """Campaign lifetimes (n,) int64 hours: :func:`raw_lifetimes_hours`, clipped."""
    return clip_lifetimes(raw_lifetimes_hours(cfg, popularity, rng))


def make_items(cfg: WorldConfig, centroids: np.ndarray, rng: np.random.Generator) -> Items:
    """Campaigns arriving as a Poisson stream from a burn-in period up to the last day.

    The arrival rate keeps about ``cfg.items`` campaigns live, so the catalogue is in steady
    state on day 0 and turns over by about ``1 / mean_campaign_days`` per day.
    """
    horizon_hours = (BURN_IN_DAYS + cfg.days) * 24
    rate_per_hour = cfg.items / (cfg.mean_campaign_days * 24)
    n = rng.poisson(rate_per_hour * horizon_hours)
    start = np.sort(rng.integers(-BURN_IN_DAYS * 24, cfg.days * 24, n))
    popularity = (1.0 - rng.random(n)) ** (-1.0 / cfg.popularity_alpha)
    end = start + lifetimes_hours(cfg, popularity, rng)
    keep = end > 0
    n_kept = int(keep.sum())
    category = rng.integers(0, cfg.categories, n_kept).astype(np.int32)
    vector = unit_rows(centroids[category] + 0.45 * rng.standard_normal((n_kept, cfg.latent_dim)))
    return Items(
        item_id=sparse_ids(np.arange(n_kept), 0x2545F491, 0x5DEECE66D),
        category=category,
        vector=vector.astype(np.float32),
        popularity=popularity[keep],
        quality=rng.standard_normal(n_kept).astype(np.float32),
        start_hour=start[keep],
        end_hour=end[keep],
    )


def make_users(cfg: WorldConfig, centroids: np.ndarray, rng: np.random.Generator) -> Users:
    """Users with log-normal activity (mean preserved), late joiners and mixed-category tastes."""
    sigma = cfg.activity_sigma
    rate = cfg.mean_requests_per_user_day * rng.lognormal(-sigma**2 / 2, sigma, cfg.users)
    rate = np.minimum(rate, cfg.max_requests_per_user_day)
    late = rng.random(cfg.users) < cfg.late_user_share
    join = np.where(late, rng.integers(0, cfg.days * 24, cfg.users), 0)
    n_home = rng.integers(1, 4, cfg.users)
    weights = rng.dirichlet(np.ones(3), cfg.users) * (np.arange(3)[None, :] < n_home[:, None])
    homes = rng.integers(0, cfg.categories, (cfg.users, 3))
    taste = np.einsum("uk,ukd->ud", weights, centroids[homes])
    interest = unit_rows(taste + 0.3 * rng.standard_normal((cfg.users, cfg.latent_dim)))
    return Users(
        user_id=sparse_ids(np.arange(cfg.users), 0x9E3779B1, 0x1234567),
        rate_per_day=rate,
        join_hour=join.astype(np.int64),
        interest=interest.astype(np.float32),
    )
