"""Realism of the default-shaped world, measured from the logs with statistics written here,
independently of both the generator and ``solaris_lib.simulate.summary``."""

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.summary import summarize
from solaris_lib.simulate.world import Simulator

pytestmark = pytest.mark.slow
DAY_US = 86_400_000_000


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("realism") / "logs"
    Simulator(WorldConfig(users=1500, items=3000, days=10, seed=21)).run(str(out))
    frame = ds.dataset(out, format="parquet", partitioning="hive",
                       ignore_prefixes=["_", "."]).to_table().to_pandas()
    frame["t"] = frame.ts.astype("int64") // 1000 if frame.ts.dtype.unit == "ns" else frame.ts.astype("int64")
    frame["day"] = (frame.t - frame.t.min() // DAY_US * DAY_US) // DAY_US
    return out, frame


def test_activity_is_heavy_tailed_with_daily_rhythm(world):
    _, f = world
    requests = f.drop_duplicates("request_id")
    per_user = requests.groupby("user_id").size().sort_values(ascending=False)
    top = per_user.iloc[: len(per_user) // 10].sum() / per_user.sum()
    assert top > 0.4  # 10% of users make over 40% of requests
    assert per_user.median() < per_user.mean() / 1.5  # most users come rarely
    by_hour = requests.groupby(requests.ts.dt.hour).size()
    assert by_hour.max() / by_hour.min() > 2.0


def test_item_popularity_is_zipf_like(world):
    _, f = world
    counts = np.sort(f.groupby("item_id").size().to_numpy())[::-1]
    head = counts[: len(counts) // 2]
    slope = np.polyfit(np.log(np.arange(1, head.size + 1)), np.log(head), 1)[0]
    assert -2.5 < slope < -0.6
    assert counts[: max(1, counts.size // 100)].sum() / counts.sum() > 0.05


def test_catalogue_turns_over_at_least_five_percent_a_day(world):
    out, f = world
    items = pq.read_table(out / "_world" / "items.parquet").to_pandas()
    start, end = items.start.astype("int64"), items["end"].astype("int64")
    t0 = f.t.min() // DAY_US * DAY_US
    unit = 1000 if items.start.dtype.unit == "ns" else 1
    for d in range(1, 10):
        lo, hi = (t0 + d * DAY_US) * unit, (t0 + (d + 1) * DAY_US) * unit
        live_before = (start < lo) & (end > lo)
        ended = live_before & (end < hi)
        started = (start >= lo) & (start < hi)
        assert ended.sum() / live_before.sum() >= 0.05
        assert started.sum() > 0  # new campaigns every day
    first_seen = f.groupby("item_id").day.min()
    assert all((first_seen == d).sum() > 0 for d in range(1, 10))


def test_pairs_persist_but_at_least_a_fifth_are_new_each_day(world):
    _, f = world
    pairs = f[["user_id", "item_id", "day"]].drop_duplicates()
    first = pairs.groupby(["user_id", "item_id"]).day.transform("min")
    for d in range(1, 10):
        today = pairs.day == d
        new_share = (first[today] == d).mean()
        assert 0.2 <= new_share < 0.8


def test_recent_clicks_raise_clicks_on_related_items(world):
    out, f = world
    items = pq.read_table(out / "_world" / "items.parquet").to_pandas()
    cat = dict(zip(items.item_id, items.category, strict=True))
    shown = f[f.position.notna()].copy()
    shown["cat"] = shown.item_id.map(cat)
    shown = shown.sort_values(["user_id", "cat", "t"])
    clicked_t = shown.t.where(shown.clicked.astype(bool))
    shown["last"] = clicked_t.groupby([shown.user_id, shown.cat]).transform(
        lambda s: s.ffill().shift())
    recent = (shown.t - shown["last"] < 6 * 3_600_000_000) & (shown.t > shown["last"])
    lift = shown.clicked[recent].mean() / shown.clicked[~recent].mean()
    assert lift > 1.5
    assert 0.01 < shown.clicked.mean() < 0.3
    assert f.p_click.between(0, 1).all()


def test_summary_agrees_with_the_independent_figures(world):
    out, f = world
    s = summarize(str(out))
    assert s.rows == len(f) and s.requests == f.request_id.nunique()
    assert s.users == f.user_id.nunique() and s.items == f.item_id.nunique()
    assert s.new_pair_share_min >= 0.2
    assert s.catalogue_turnover_min >= 0.05
    assert s.related_click_lift > 1.5
