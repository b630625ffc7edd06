"""Which items are live at ``asof``: recently seen, or within a few of their own gaps."""

from datetime import timedelta

import pytest

from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.speculation.candidates import calibrate_live_window, live_items
from solaris_lib.speculation.config import MineConfig, SpeculateConfig
from solaris_lib.speculation.pipeline import mined_in_memory

from .builders import T0, row, write_logs

pytestmark = pytest.mark.integration

END = T0 + timedelta(days=20)
HOUR = 1.0
DAY = 24 * HOUR


def _rows():
    """Hours after T0 of each item's rows; END is 480 h."""
    times = {
        1: [470.0, 475.0],  # seen 5 h ago: live by the window (1 day)
        2: [400.0 + k * 0.1 for k in range(50)],  # a campaign every 6 min, over 75 h ago: ended
        3: [0.0, 5 * DAY, 10 * DAY, 15 * DAY],  # a film rated every 5 days, last 5 days ago
        4: [2 * DAY, 15 * DAY],  # a 13-day gap, last seen 5 days ago: still within 3 gaps
        5: [17 * DAY],  # seen once 3 days ago: no gap yet, the window alone: ended
        6: [0.0, 1 * DAY, 2 * DAY],  # one day apart, last seen 18 days ago: ended
    }
    return [row(f"r{item}-{n}", hours, user=n % 3, item=item)
            for item, hours_list in times.items() for n, hours in enumerate(hours_list)]


@pytest.fixture(scope="module")
def mined(spark, tmp_path_factory):
    root = write_logs(tmp_path_factory.mktemp("live-logs"), _rows())
    logs = read_window_spark(spark, str(root), Interval(T0, END))
    return mined_in_memory(spark, logs, END, MineConfig(lookback=timedelta(days=28)))


def _live(mined, **config) -> set[int]:
    config = SpeculateConfig(budget_per_user=1, live_window=timedelta(days=1), **config)
    return {r.item_id for r in live_items(mined, config).collect()}


def test_an_item_stays_live_for_a_few_of_its_own_gaps(mined):
    assert _live(mined) == {1, 3, 4}


def test_a_deep_faiss_pool_does_not_make_every_item_live(mined):
    # the whole-window fallback counts the budget and the popular list, not the FAISS depth
    assert _live(mined, faiss_k=50) == {1, 3, 4}


def test_too_few_live_items_make_the_whole_window_live(mined):
    # without the gap rule only item 1 is live, fewer than twice the budget (2)
    assert _live(mined, live_gaps=0.0) == {1, 2, 3, 4, 5, 6}


def _labels(spark, rows_per_item: dict[int, int]):
    """Log rows of the interval after ``END``: only ``item_id`` matters to the calibration."""
    items = [(item,) for item, count in rows_per_item.items() for _ in range(count)]
    return spark.createDataFrame(items, "item_id long")


def _calibrated(spark, mined, rows_per_item, **config) -> timedelta:
    config = SpeculateConfig(budget_per_user=1, live_window=timedelta(days=1), **config)
    return calibrate_live_window(mined, _labels(spark, rows_per_item), config)


def test_items_that_come_back_after_weeks_widen_the_live_window(spark, mined):
    # item 6 was silent 432 h at END and still carried half the next interval's rows
    window = _calibrated(spark, mined, {1: 10, 6: 10})
    assert window == timedelta(hours=433)
    config = SpeculateConfig(budget_per_user=1, live_window=window)
    assert {r.item_id for r in live_items(mined, config).collect()} == {1, 2, 3, 4, 5, 6}


def test_a_small_tail_of_late_rows_keeps_the_window(spark, mined):
    # 1 row of 51 (1.96 %) on the silent item is within the 2 % allowed to fall outside
    assert _calibrated(spark, mined, {1: 50, 6: 1}) == timedelta(days=1)
    # at 1 % it is not: the window grows to reach item 6's 432 h
    assert _calibrated(spark, mined, {1: 50, 6: 1}, live_tail_share=0.01) == timedelta(hours=433)


def test_the_window_grows_only_as_far_as_the_rows_need(spark, mined):
    # items 3 and 4 (silent 120 h) carry the rows; nothing beyond them is needed
    assert _calibrated(spark, mined, {3: 5, 4: 5, 1: 1}) == timedelta(hours=121)


def test_no_labelled_rows_on_window_items_or_no_calibration_keep_the_window(spark, mined):
    assert _calibrated(spark, mined, {99: 5}) == timedelta(days=1)
    assert _calibrated(spark, mined, {6: 5}, live_tail_share=0.0) == timedelta(days=1)
