"""Run a world day by day and write its request logs (one parquet file per hour partition).

Memory is bounded by one hour of rows plus the entities; rows stream to disk as they are made.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from solaris_lib.errors import ConfigError
from solaris_lib.logs.schema import WITH_EVAL_SCHEMA, hour_partition
from solaris_lib.progress import step
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.entities import (
    Items,
    Users,
    category_centroids,
    make_items,
    make_users,
    unit_rows,
)
from solaris_lib.simulate.requests import (
    DayPools,
    build_pools,
    click_logits,
    draw_candidates,
    hourly_rhythm,
    rank_and_click,
)

log = logging.getLogger(__name__)
WORLD_DIRNAME = "_world"


@dataclass
class SimulationResult:
    """What a simulation wrote."""

    out: str
    rows: int
    requests: int
    files: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


class Simulator:
    """A seeded world: entities drawn at construction, requests drawn day by day."""

    def __init__(self, cfg: WorldConfig) -> None:
        self.cfg = cfg
        rng = np.random.default_rng([cfg.seed, 0xE17])
        centroids = category_centroids(cfg, rng)
        self.items: Items = make_items(cfg, centroids, rng)
        self.users: Users = make_users(cfg, centroids, rng)
        self.excitation = np.zeros((cfg.users, cfg.categories), np.float32)
        self.last_hour = np.zeros(cfg.users, np.int64)
        self._decay_per_hour = float(np.log(2) / cfg.excitation_half_life_hours)

    def run(self, out: str, *, overwrite: bool = False) -> SimulationResult:
        """Write every day's logs under ``out`` plus the ground truth under ``out/_world``."""
        root = _prepare_out(Path(out), overwrite)
        started, rows, requests, files = time.perf_counter(), 0, 0, 0
        for day in range(self.cfg.days):
            with step(f"day {day + 1}/{self.cfg.days}") as done:
                day_rows = 0
                for hour, table in self.day(day):
                    target = root / hour_partition(hour) / "part-00000.parquet"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    pq.write_table(table, target, compression="zstd")
                    day_rows += table.num_rows
                    requests += table.num_rows // self.cfg.candidates_per_request
                    files += 1
                rows += day_rows
                done.count(day_rows, "rows")
        with step("ground truth"):
            self._write_ground_truth(root)
        return SimulationResult(str(root), rows, requests, files, time.perf_counter() - started)

    def day(self, day: int):
        """Yield ``(hour start, table)`` for each hour of ``day`` that has requests."""
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, 0xDA7, day])
        if day > 0:
            noise = rng.standard_normal(self.users.interest.shape).astype(np.float32)
            self.users.interest = unit_rows(self.users.interest + cfg.drift_per_day * noise)
        counts = self._request_counts(day, rng)  # (users, 24)
        active = np.flatnonzero(counts.sum(axis=1) > 0)
        first, last = day * 24, day * 24 + 23
        live_today = np.flatnonzero(
            (self.items.start_hour <= last) & (self.items.end_hour > first)
        )
        pools = build_pools(cfg, self.users.interest, active, self.items, live_today)
        for h in range(24):
            users = np.repeat(np.arange(cfg.users), counts[:, h])
            if users.size:
                yield cfg.start + timedelta(hours=first + h), self._hour(first + h, users, pools, rng)

    def _request_counts(self, day: int, rng: np.random.Generator) -> np.ndarray:
        """Requests per (user, hour of ``day``).  (users, 24)"""
        hours = day * 24 + np.arange(24)
        lam = self.users.rate_per_day[:, None] / 24 * hourly_rhythm(np.arange(24))[None, :]
        lam = np.where(self.users.join_hour[:, None] <= hours[None, :], lam, 0.0)
        if self.cfg.session_requests <= 0:
            return rng.poisson(lam)
        return session_counts(lam, self.cfg.session_requests, rng)

    def _hour(self, hour: int, users: np.ndarray, pools: DayPools, rng) -> pa.Table:
        cfg = self.cfg
        rows = np.array([pools.row_of_user[int(u)] for u in users])
        cand = draw_candidates(cfg, pools, rows, self.items, hour, rng)  # (R, K)
        excitation = self._excitation_at(users, hour)
        logits = click_logits(cfg, self.users.interest[users], excitation, self.items, cand)
        position, clicked, p_click = rank_and_click(cfg, logits, rng)
        self._record_clicks(users, cand, clicked, hour)
        offsets = np.sort(rng.integers(0, 3_600_000_000, users.size))
        return self._table(hour, users, cand, position, clicked, p_click, offsets)

    def _excitation_at(self, users: np.ndarray, hour: int) -> np.ndarray:
        """Each requesting user's decayed category excitation at ``hour``.  (R, C)"""
        unique = np.unique(users)
        age = hour - self.last_hour[unique]
        self.excitation[unique] *= np.exp(-self._decay_per_hour * age)[:, None].astype(np.float32)
        self.last_hour[unique] = hour
        return self.excitation[users]

    def _record_clicks(self, users, cand, clicked, hour) -> None:
        r, k = np.nonzero(clicked)
        np.add.at(self.excitation, (users[r], self.items.category[cand[r, k]]), 1.0)

    def _table(self, hour, users, cand, position, clicked, p_click, offsets) -> pa.Table:
        k = self.cfg.candidates_per_request
        start_us = int((self.cfg.start + timedelta(hours=hour)).timestamp() * 1_000_000)
        request_ids = [f"r{self.cfg.seed:x}-{hour:05d}-{i:05d}" for i in range(users.size)]
        shown = position.reshape(-1) >= 0
        columns = {
            "request_id": pa.array(np.repeat(np.array(request_ids), k)),
            "ts": pa.array(np.repeat(start_us + offsets, k), WITH_EVAL_SCHEMA.field("ts").type),
            "user_id": pa.array(np.repeat(self.users.user_id[users], k)),
            "item_id": pa.array(self.items.item_id[cand.reshape(-1)]),
            "position": pa.array(position.reshape(-1), pa.int32(), mask=~shown),
            "clicked": pa.array(clicked.reshape(-1), pa.bool_(), mask=~shown),
            "p_click": pa.array(p_click.reshape(-1), pa.float32()),
        }
        return pa.Table.from_pydict(columns, schema=WITH_EVAL_SCHEMA)

    def _write_ground_truth(self, root: Path) -> None:
        """Entities for evaluation and tests only (readers skip folders starting with ``_``)."""
        folder = root / WORLD_DIRNAME
        folder.mkdir(exist_ok=True)
        it = self.items
        start = self.cfg.start
        hours = lambda h: pa.array([start + timedelta(hours=int(x)) for x in h])  # noqa: E731
        pq.write_table(pa.table({
            "item_id": it.item_id, "category": it.category, "popularity": it.popularity,
            "quality": it.quality, "start": hours(it.start_hour), "end": hours(it.end_hour),
        }), folder / "items.parquet")
        pq.write_table(pa.table({
            "user_id": self.users.user_id, "rate_per_day": self.users.rate_per_day,
            "join": hours(self.users.join_hour),
        }), folder / "users.parquet")
        (folder / "config.json").write_text(self.cfg.model_dump_json(indent=2))


def session_counts(lam: np.ndarray, mean_requests: float, rng: np.random.Generator) -> np.ndarray:
    """Requests per cell when they come in sessions: sessions ~ Poisson(lam / mean_requests)
    per cell, each of Geometric(1 / mean_requests) requests (mean ``mean_requests``), so a cell
    keeps its mean ``lam`` but its requests arrive in bursts.  lam (U, H) -> counts (U, H)."""
    sessions = rng.poisson(lam / max(mean_requests, 1.0))
    counts = np.zeros(lam.shape, np.int64)
    cells = np.repeat(np.arange(lam.size), sessions.reshape(-1))
    sizes = rng.geometric(1.0 / max(mean_requests, 1.0), cells.size)
    np.add.at(counts.reshape(-1), cells, sizes)
    return counts


def _prepare_out(out: Path, overwrite: bool) -> Path:
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"{out} is not empty; pass --overwrite to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def load_world_config(logs_root: str) -> WorldConfig | None:
    """The config a simulated log folder was made with, or None for other logs."""
    path = Path(logs_root) / WORLD_DIRNAME / "config.json"
    return WorldConfig.model_validate(json.loads(path.read_text())) if path.exists() else None
