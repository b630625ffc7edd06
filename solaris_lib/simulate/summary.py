"""Realism statistics of a request log, computed from the logs alone (plus, for catalogue
turnover and related-item clicks, the ground-truth entities in ``_world/``).

These are the figures the demo prints and the tests check; none of them calls the generator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from solaris_lib.logs.schema import timestamps_us
from solaris_lib.simulate.world import WORLD_DIRNAME

US_PER_HOUR = 3_600_000_000
US_PER_DAY = 24 * US_PER_HOUR


@dataclass
class WorldSummary:
    """Headline statistics of a log folder; ``None`` where the logs cannot tell."""

    rows: int
    requests: int
    users: int
    items: int
    days: int
    top_decile_request_share: float  # share of requests made by the 10% most active users
    median_requests_per_user_day: float
    peak_to_trough_hourly: float  # busiest / quietest hour of day
    zipf_slope: float  # slope of log(rows) on log(rank) over items
    new_pair_share_min: float  # min over days >= 1 of pairs new to their user that day
    new_pair_share_mean: float
    repeat_pair_share_mean: float  # 1 - new share: how much persists
    catalogue_turnover_min: float | None  # min daily share of live campaigns started or ended
    ctr_shown: float | None
    related_click_lift: float | None  # CTR after a same-category click in 6 h / CTR otherwise

    def as_dict(self) -> dict:
        return asdict(self)


def _read(logs_root: str) -> pa.Table:
    dataset = ds.dataset(logs_root, format="parquet", partitioning="hive",
                         ignore_prefixes=[".", "_"])
    wanted = ["request_id", "ts", "user_id", "item_id", "position", "clicked"]
    return dataset.to_table(columns=[c for c in wanted if c in dataset.schema.names])


def activity_stats(user: np.ndarray, request: np.ndarray, days: int) -> tuple[float, float]:
    """(share of requests by the top 10% users, median requests per user-day among users)."""
    _, first = np.unique(request, return_index=True)
    _, per_user = np.unique(user[first], return_counts=True)
    per_user = np.sort(per_user)[::-1]
    top = max(1, per_user.size // 10)
    return float(per_user[:top].sum() / per_user.sum()), float(np.median(per_user) / days)


def zipf_slope(item: np.ndarray) -> float:
    """Least-squares slope of log(rows) on log(rank) over the 90% most frequent items."""
    _, counts = np.unique(item, return_counts=True)
    counts = np.sort(counts)[::-1][: max(2, int(counts.size * 0.9))]
    ranks = np.arange(1, counts.size + 1)
    return float(np.polyfit(np.log(ranks), np.log(counts), 1)[0])


def new_pair_shares(user: np.ndarray, item: np.ndarray, day: np.ndarray) -> np.ndarray:
    """For each day after the first: share of that day's distinct (user, item) pairs never seen
    for that user on an earlier day."""
    pair = np.stack([user, item], axis=1)
    codes = np.unique(pair, axis=0, return_inverse=True)[1].reshape(-1)
    first_day = np.full(codes.max() + 1, np.iinfo(np.int64).max)
    np.minimum.at(first_day, codes, day)
    shares = []
    for d in np.unique(day)[1:]:
        today = np.unique(codes[day == d])
        shares.append(float(np.mean(first_day[today] == d)))
    return np.array(shares)


def turnover(items: pa.Table, start_us: int, days: int) -> np.ndarray:
    """Daily share of the live catalogue that started or ended that day (ground truth)."""
    begin = items.column("start").cast(pa.int64()).to_numpy()
    end = items.column("end").cast(pa.int64()).to_numpy()
    shares = []
    for d in range(1, days):
        lo = start_us + d * US_PER_DAY
        live = (begin < lo + US_PER_DAY) & (end > lo)
        changed = live & (((begin >= lo) & (begin < lo + US_PER_DAY)) | (end < lo + US_PER_DAY))
        shares.append(changed.sum() / max(live.sum(), 1))
    return np.array(shares) / 2  # each turnover is one start and one end


def related_click_lift(table: pa.Table, category_of: dict[int, int]) -> float | None:
    """CTR of shown items whose category the user clicked in the previous 6 h, over the CTR of
    other shown items.  Measures the sequence effect from the logs."""
    shown = table.filter(pc.is_valid(table.column("position")))
    if shown.num_rows == 0:
        return None
    user = shown.column("user_id").to_numpy()
    ts = timestamps_us(shown.column("ts"))
    cat = np.array([category_of.get(int(i), -1) for i in shown.column("item_id").to_numpy()])
    click = shown.column("clicked").to_numpy(zero_copy_only=False).astype(bool)
    order = np.lexsort((ts, cat, user))
    user, ts, cat, click = user[order], ts[order], cat[order], click[order]
    group = np.cumsum(np.r_[True, (user[1:] != user[:-1]) | (cat[1:] != cat[:-1])]) - 1
    span = int(ts.max() - ts.min()) + 2
    rel = ts - ts.min() + 1
    keyed = np.where(click, group * span + rel, group * span)
    running = np.maximum.accumulate(keyed)
    previous = np.r_[0, running[:-1]]
    previous = np.where(previous >= group * span, previous - group * span, 0)
    last_click = previous + ts.min() - 1
    # a click of the same request (same ts) does not count
    recent = (previous > 0) & (ts > last_click) & (ts - last_click < 6 * US_PER_HOUR)
    if recent.sum() == 0 or (~recent).sum() == 0:
        return None
    return float(click[recent].mean() / max(click[~recent].mean(), 1e-9))


def summarize(logs_root: str) -> WorldSummary:
    """Compute :class:`WorldSummary` for the logs under ``logs_root``."""
    table = _read(logs_root)
    user = table.column("user_id").to_numpy()
    item = table.column("item_id").to_numpy()
    ts = timestamps_us(table.column("ts"))
    t0 = int(ts.min()) // US_PER_DAY * US_PER_DAY
    day = (ts - t0) // US_PER_DAY
    days = int(day.max()) + 1
    request = pc.dictionary_encode(table.column("request_id")).combine_chunks().indices.to_numpy()
    top_share, median_rate = activity_stats(user, request, days)
    per_hour = np.bincount((ts // US_PER_HOUR) % 24, minlength=24)
    shares = new_pair_shares(user, item, day) if days > 1 else np.array([1.0])
    world = Path(logs_root) / WORLD_DIRNAME
    items = pq.read_table(world / "items.parquet") if world.exists() else None
    clicked = table.column("clicked") if "clicked" in table.column_names else None
    ctr = pc.mean(pc.cast(pc.drop_null(clicked), pa.float64())).as_py() if clicked else None
    lift = None
    if items is not None and ctr is not None:
        mapping = dict(zip(items.column("item_id").to_pylist(),
                           items.column("category").to_pylist(), strict=True))
        lift = related_click_lift(table, mapping)
    return WorldSummary(
        rows=table.num_rows,
        requests=int(np.unique(request).size),
        users=int(np.unique(user).size),
        items=int(np.unique(item).size),
        days=days,
        top_decile_request_share=top_share,
        median_requests_per_user_day=median_rate,
        peak_to_trough_hourly=float(per_hour.max() / max(per_hour.min(), 1)),
        zipf_slope=zipf_slope(item),
        new_pair_share_min=float(shares.min()),
        new_pair_share_mean=float(shares.mean()),
        repeat_pair_share_mean=float(1 - shares.mean()),
        catalogue_turnover_min=float(turnover(items, t0, days).min()) if items is not None else None,
        ctr_shown=ctr,
        related_click_lift=lift,
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def format_summary(s: WorldSummary) -> str:
    """A human-readable table of the realism figures."""
    lines = [
        f"rows                       {s.rows:>12,}",
        f"requests                   {s.requests:>12,}",
        f"users / items              {s.users:>12,} / {s.items:,}",
        f"days                       {s.days:>12}",
        f"requests by top 10% users  {_pct(s.top_decile_request_share):>12}",
        f"median requests/user/day   {s.median_requests_per_user_day:>12.2f}",
        f"hourly peak / trough       {s.peak_to_trough_hourly:>12.2f}",
        f"Zipf slope (rows by rank)  {s.zipf_slope:>12.2f}",
        f"catalogue churn/day (min)  {_pct(s.catalogue_turnover_min):>12}",
        f"new pairs/day (min, mean)  {_pct(s.new_pair_share_min):>12} / "
        f"{_pct(s.new_pair_share_mean)}",
        f"CTR of shown items         {_pct(s.ctr_shown):>12}",
        "related-click lift (6 h)   "
        + ("n/a" if s.related_click_lift is None else f"{s.related_click_lift:>11.2f}x"),
    ]
    return "\n".join(lines)
