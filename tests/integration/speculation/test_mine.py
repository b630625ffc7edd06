"""mine on hand-built logs, compared with pure-Python expectations; atomic, identical reruns."""

from datetime import timedelta

import pyarrow.parquet as pq
import pytest

from solaris_lib.intervals import Interval
from solaris_lib.layout import MINED, DataLayout
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.speculation.config import MineConfig
from solaris_lib.speculation.mine import mine
from solaris_lib.speculation.pipeline import run_mine
from solaris_lib.storage import is_complete
from tests.integration.speculation.builders import (
    T0,
    close,
    expected_cooccurrence,
    expected_history,
    expected_pair_stats,
    row,
    write_logs,
)

pytestmark = pytest.mark.integration

ROWS = [
    row("r1", 0.5, 1, 10, 0, True), row("r1", 0.5, 1, 11, None, None), row("r1", 0.5, 1, 12, 1, False),
    row("r2", 3.2, 1, 10, 0, False), row("r2", 3.2, 1, 13, None, None),
    row("r3", 5.0, 2, 10, None, None), row("r3", 5.0, 2, 11, 0, True), row("r3", 5.0, 2, 14, 1, None),
    row("r4", 20.0, 3, 12, 2, False), row("r4", 20.0, 3, 10, 0, False),
    row("r5", 47.5, 1, 11, 0, False), row("r5", 47.5, 1, 14, None, None),
]
END = T0 + timedelta(hours=48)
CONFIG = MineConfig(lookback=timedelta(days=2), max_history=3, max_history_clicks=1,
                    half_life=timedelta(hours=12),
                    trend_window=timedelta(hours=6), short_window=timedelta(hours=30),
                    cooc_items_per_user=2, cooc_top_n=2)


@pytest.fixture(scope="module")
def mined(spark, tmp_path_factory):
    root = write_logs(tmp_path_factory.mktemp("mine") / "logs", ROWS)
    logs = read_window_spark(spark, str(root), Interval(END - CONFIG.lookback, END))
    return {name: df.collect() for name, df in mine(logs, END, CONFIG).items()}


def test_pair_stats_match_python(mined):
    expected = expected_pair_stats(ROWS, END, CONFIG.half_life.total_seconds(),
                                   CONFIG.recent_half_life.total_seconds())
    got = {(r.user_id, r.item_id): r for r in mined["pair_stats"]}
    assert set(got) == set(expected)
    for key, (n, shown, clicks, first, last, decayed, recent) in expected.items():
        r = got[key]
        assert (r.times_scored, r.times_shown, r.clicks) == (n, shown, clicks)
        assert (r.first_seen, r.last_seen) == (first.replace(tzinfo=None), last.replace(tzinfo=None))
        assert close(r.decayed, decayed)
        assert close(r.recent_decayed, recent)


def test_user_history_is_newest_shown_events_oldest_first(mined):
    got = {r.user_id: r for r in mined["user_history"]}
    assert {u: r.item_ids for u, r in got.items()} == expected_history(
        ROWS, CONFIG.max_history, CONFIG.max_history_clicks)
    assert got[1].item_ids == [10, 12, 10, 11]  # the older click (r1,10), then the newest three
    assert got[1].clicked == [True, False, False, False]  # (r1,10) (r1,12) (r2,10) (r5,11)
    assert all(r.asof == END.replace(tzinfo=None) for r in got.values())
    assert all(r.ts == sorted(r.ts) for r in got.values())


def test_item_stats_match_python(mined):
    got = {r.item_id: r for r in mined["item_stats"]}
    for item in {r["item_id"] for r in ROWS}:
        mine_rows = [r for r in ROWS if r["item_id"] == item]
        assert got[item].popularity == len(mine_rows)
        assert got[item].users == len({r["user_id"] for r in mine_rows})
        recent = sum(r["ts"] >= END - CONFIG.trend_window for r in mine_rows)
        assert got[item].recent == recent
        assert got[item].short_rows == sum(r["ts"] >= END - CONFIG.short_window for r in mine_rows)
    assert got[11].last_seen == (T0 + timedelta(hours=47.5)).replace(tzinfo=None)


def test_user_stats_count_requests(mined):
    got = {r.user_id: (r.requests, r.rows) for r in mined["user_stats"]}
    assert got == {1: (3, 7), 2: (1, 3), 3: (1, 2)}


def test_cooccurrence_matches_python(mined):
    expected = expected_cooccurrence(ROWS, CONFIG.cooc_items_per_user, CONFIG.cooc_top_n)
    got = {}
    for r in sorted(mined["cooccurrence"], key=lambda r: (r.item_id, r.rank)):
        got.setdefault(r.item_id, []).append((r.neighbor_id, r.users))
    assert got == expected


def test_history_uses_all_rows_when_logs_have_no_positions(spark, tmp_path):
    rows = [dict(r, position=None, clicked=None) for r in ROWS]
    root = write_logs(tmp_path / "logs", rows, drop=("position", "clicked"))
    logs = read_window_spark(spark, str(root), Interval(END - CONFIG.lookback, END))
    got = {r.user_id: r.item_ids for r in mine(logs, END, CONFIG)["user_history"].collect()}
    assert got == expected_history(rows, CONFIG.max_history, CONFIG.max_history_clicks)


def test_run_mine_writes_complete_partitions_and_reruns_identically(spark, tmp_path):
    root = tmp_path / "data"
    write_logs(root / "logs", ROWS)
    layout = DataLayout(root=str(root), models_root=str(root / "models"))
    interval = Interval(END - timedelta(hours=1), END)
    first = run_mine(spark, layout, interval, CONFIG)
    tables = {name: pq.read_table(layout.output(MINED, interval, name)) for name in first}
    assert first["pair_stats"] == len(expected_pair_stats(ROWS, END, 1.0))
    assert run_mine(spark, layout, interval, CONFIG) == first
    for name, table in tables.items():
        assert is_complete(layout.output(MINED, interval, name))
        assert pq.read_table(layout.output(MINED, interval, name)).equals(table)


def test_empty_window_gives_empty_tables(spark, tmp_path):
    root = tmp_path / "data"
    write_logs(root / "logs", ROWS)
    layout = DataLayout(root=str(root), models_root=str(root / "models"))
    interval = Interval(T0 - timedelta(days=30), T0 - timedelta(days=29))
    written = run_mine(spark, layout, interval, CONFIG)
    assert written == dict.fromkeys(written, 0)
    assert is_complete(layout.output(MINED, interval, "user_history"))
    assert pq.read_table(layout.output(MINED, interval, "user_history")).num_rows == 0
