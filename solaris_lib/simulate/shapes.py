"""Generated logs of several shapes, each with the evaluation that goes with it.

Speculation is checked on more than one kind of log (docs/speculation.md, "Log shapes"):

============ ========================================================================================
impressions  the default world's generator (:class:`WorldConfig`): every request logs the 50
             candidates the ranker scored, so pairs repeat; campaigns live about two weeks
ratings      one row per rating (:mod:`ratings`): no positions, clicks or repeated pairs, sparse
             users, strong popularity and a weak personal signal
sessions     the world's generator with bursty short sessions (``session_requests``): a user's
             requests come in bursts within an hour, most users are quiet for days, many join
             late, and interests drift faster
long_lived   the world's generator with a long-lived catalogue: campaigns run for months and
             interests drift slowly, so last week's pairs and items stay relevant
============ ========================================================================================

A world we generate tests our code, it never proves quality: each shape is a check that
speculation holds up (above its best single-source baseline), not a target to tune to.
The default world's draws are untouched: the shapes are other configs of the same generators.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.ratings import RatingsConfig, write_ratings
from solaris_lib.simulate.world import Simulator

SHAPES = ("impressions", "ratings", "sessions", "long_lived")
SIZES = ("bench", "test")


@dataclass(frozen=True)
class Shape:
    """A generator config and how to evaluate speculation on its logs."""

    name: str
    world: WorldConfig | RatingsConfig
    cutoffs: tuple[datetime, ...]  # each evaluated separately; figures are pooled over them
    horizon: timedelta
    lookback: timedelta
    budget_per_user: int | None = None  # exactly one of the two budgets
    budget_factor: float | None = None

    def write(self, out: str) -> int:
        """Write the shape's logs under ``out``; returns rows written."""
        if isinstance(self.world, RatingsConfig):
            return write_ratings(self.world, out)
        return Simulator(self.world).run(out).rows


def _day(world, day: float) -> datetime:
    return world.start + timedelta(days=day)


def _world_shape(name: str, world: WorldConfig, cutoff_day: float, horizon_days: float) -> Shape:
    return Shape(name, world, (_day(world, cutoff_day),), timedelta(days=horizon_days),
                 timedelta(days=28), budget_factor=3.0)


def shape(name: str, size: str = "bench", seed: int = 7) -> Shape:
    """The shape ``name`` at ``size`` ("bench": the benchmark's worlds, minutes of Spark each;
    "test": tiny worlds for the test suite)."""
    if name not in SHAPES or size not in SIZES:
        raise ValueError(f"unknown shape {name!r} or size {size!r}: shapes {SHAPES}, sizes {SIZES}")
    small = size == "test"
    users, items, days = (150, 250, 4) if small else (500, 1500, 10)
    common = {"users": users, "items": items, "days": days, "seed": seed}
    if name == "impressions":
        return _world_shape(name, WorldConfig(**common), days - 3 + small, 2 if small else 3)
    if name == "sessions":
        world = WorldConfig(**common, session_requests=8.0, mean_requests_per_user_day=1.0,
                            late_user_share=0.6, drift_per_day=0.25)
        return _world_shape(name, world, days - 3 + small, 2 if small else 3)
    if name == "long_lived":
        world = WorldConfig(**common, mean_campaign_days=120.0, drift_per_day=0.03)
        return _world_shape(name, world, days - 3 + small, 2 if small else 3)
    ratings = RatingsConfig(users=200, items=400, days=120, seed=seed) if small else \
        RatingsConfig(seed=seed)
    cutoffs = (60, 90) if small else (75, 105, 135, 165, 195)
    return Shape(name, ratings, tuple(_day(ratings, d) for d in cutoffs), timedelta(days=7),
                 timedelta(days=28), budget_per_user=50 if small else 200)
