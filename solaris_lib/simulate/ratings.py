"""A ratings-shaped log: one row per rating, no positions, no clicks, no repeated pairs.

The shape of a small public rating log (about a thousand users, 1,700 films, 7 months): every
user rates at least ``min_ratings`` films, most of them in a first burst, and some users come
back in later sessions; film popularity is long-tailed and new releases draw a burst of
ratings; a low-rank taste adds a personal signal. A user rates a film once.

What a user rates is drawn by ``popularity + taste_weight x (film . taste) + novelty``
(a softmax over the films released by then, without replacement). With the defaults the
personal signal is weak beside popularity, as measured on a real log of this shape: there the
textbook popularity list (the most rated films new to the user) covered 0.44-0.47 of the known
users' next-week ratings at 200 films per user, more than a learned multi-source speculation
did (docs/speculation.md, "Log shapes"). The same config and seed give the same rows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition
from solaris_lib.simulate.entities import sparse_ids


class RatingsConfig(BaseModel):
    """Everything that shapes a ratings log (frozen; unknown keys rejected)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: int = Field(950, ge=1, description="Raters over the whole period.")
    items: int = Field(1700, ge=10, description="Films (some released during the period).")
    days: int = Field(215, ge=2, description="Days of ratings.")
    seed: int = Field(7, ge=0, description="Seed of every random draw.")
    start: datetime = Field(datetime(1997, 9, 20, tzinfo=UTC), description="UTC start of day 0.")
    rank: int = Field(8, ge=1, description="Dimension of the films' and users' tastes.")
    popularity_sigma: float = Field(
        1.6, ge=0, description="Std of the films' log-popularity (the long tail)."
    )
    taste_weight: float = Field(
        1.5, ge=0, description="Weight of film . taste on the rating logit (the personal signal)."
    )
    novelty_weight: float = Field(
        1.5, ge=0, description="Logit boost of a new release, decaying over novelty_days."
    )
    novelty_days: float = Field(30.0, gt=0, description="Decay of the new-release boost.")
    release_share: float = Field(
        0.12, ge=0, le=1, description="Share of films released during the period."
    )
    min_ratings: int = Field(20, ge=1, description="Ratings every user makes at least.")
    extra_ratings_log_mean: float = Field(
        3.8, description="Log-normal mu of the ratings a user makes beyond min_ratings."
    )
    extra_ratings_log_sigma: float = Field(1.0, ge=0, description="Its log-normal sigma.")
    return_share: float = Field(
        0.35, ge=0, le=1, description="Share of users who come back after their first burst."
    )
    return_gap_days: float = Field(20.0, gt=0, description="Mean gap between return sessions.")


def _films(cfg: RatingsConfig, rng: np.random.Generator):
    """(items, rank) taste vectors, (items,) log-popularity, (items,) release day (<0: before)."""
    vectors = rng.standard_normal((cfg.items, cfg.rank)) / np.sqrt(cfg.rank)
    log_pop = rng.normal(0.0, cfg.popularity_sigma, cfg.items)
    released = rng.random(cfg.items) < cfg.release_share
    release = np.where(released, rng.uniform(0, cfg.days, cfg.items), -1.0)
    return vectors, log_pop, release


def _rating_days(cfg: RatingsConfig, rng: np.random.Generator, join: float, count: int):
    """(count,) sorted rating days of one user: a first burst, then (for ``return_share`` of
    users) return sessions."""
    days = np.full(count, join)
    if rng.random() < cfg.return_share:
        later = rng.random(count) > rng.beta(4, 2)
        returns = join + np.cumsum(rng.exponential(cfg.return_gap_days, 8))
        days[later] = rng.choice(returns, later.sum())
    return np.sort(days + rng.uniform(0, 0.05, count))


def _choose(cfg: RatingsConfig, rng, taste, films, day: float, count: int) -> np.ndarray:
    """``count`` distinct films released by ``day``, drawn by popularity, taste and novelty."""
    vectors, log_pop, release = films
    age = day - np.maximum(release, day - 365)
    novelty = np.exp(-age / cfg.novelty_days) * (release >= 0)
    logit = log_pop + cfg.taste_weight * (vectors @ taste) + cfg.novelty_weight * novelty
    logit[release > day] = -np.inf
    weights = np.exp(logit - logit[np.isfinite(logit)].max())
    count = min(count, int((weights > 0).sum()))
    return rng.choice(len(weights), count, replace=False, p=weights / weights.sum())


def generate_ratings(cfg: RatingsConfig) -> pa.Table:
    """One row per rating: (request_id, ts, user_id, item_id), ids sparse int64, sorted by ts."""
    rng = np.random.default_rng([cfg.seed, 0x5A7])
    films = _films(cfg, rng)
    users, items, days = [], [], []
    for user in range(cfg.users):
        count = cfg.min_ratings + int(rng.lognormal(cfg.extra_ratings_log_mean,
                                                     cfg.extra_ratings_log_sigma))
        when = _rating_days(cfg, rng, rng.uniform(0, cfg.days - 1), count)
        when = when[when < cfg.days]
        chosen = _choose(cfg, rng, rng.standard_normal(cfg.rank), films, float(when[-1]), len(when))
        users.append(np.full(len(chosen), user))
        items.append(chosen)
        days.append(when[: len(chosen)])
    user, item, day = (np.concatenate(a) for a in (users, items, days))
    order = np.argsort(day, kind="stable")
    ts = int(cfg.start.timestamp() * 1e6) + (day[order] * 86400e6).astype(np.int64)
    return pa.table({
        "request_id": [f"r{cfg.seed:x}-{i}" for i in range(len(ts))],
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(sparse_ids(user[order], 0x9E3779B1, 0x1234567), pa.int64()),
        "item_id": pa.array(sparse_ids(item[order], 0x2545F491, 0x5DEECE66D), pa.int64()),
    })


def write_ratings(cfg: RatingsConfig, out: str) -> int:
    """Write :func:`generate_ratings` as contract logs under ``out``; returns rows written."""
    table = generate_ratings(cfg)
    write_contract(table, Path(out))
    return table.num_rows


def write_contract(table: pa.Table, root: Path) -> None:
    """Write ``table`` (contract columns, any subset) as one parquet file per hour partition.

    Also the converter for an external ratings file (user, item, rating, timestamp): one row
    per rating, ``request_id`` unique per row, ``ts`` the rating time, no ``position`` or
    ``clicked``."""
    hours = table.column("ts").cast(pa.int64()).to_numpy() // 3_600_000_000
    order = np.argsort(hours, kind="stable")
    table, hours = table.take(order), hours[order]
    bounds = np.flatnonzero(np.r_[True, hours[1:] != hours[:-1], True])
    schema = pa.schema([REQUEST_LOG_SCHEMA.field(n) for n in table.column_names])
    for first, last in zip(bounds[:-1], bounds[1:], strict=True):
        hour = datetime.fromtimestamp(int(hours[first]) * 3600, tz=UTC)
        folder = root / hour_partition(hour)
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(first, last - first).cast(schema), folder / "part-0.parquet")


def end_of(cfg: RatingsConfig) -> datetime:
    """The end of the log (exclusive)."""
    return cfg.start + timedelta(days=cfg.days)
