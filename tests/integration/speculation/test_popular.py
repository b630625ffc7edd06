"""The popular source: the most popular live items, new to each user when repeats are on, by
the popularity measure that covered most of a labelled interval."""

from datetime import timedelta

import pytest

from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.speculation.candidates import gather
from solaris_lib.speculation.config import MineConfig, SpeculateConfig
from solaris_lib.speculation.pipeline import mined_in_memory

from .builders import T0, row, write_logs

pytestmark = pytest.mark.integration

END = T0 + timedelta(days=2)
# item -> rows, all in the same hour (decayed counts then rank as the counts do)
COUNTS = {10: 9, 11: 8, 12: 7, 13: 6, 14: 5, 15: 4, 16: 3, 17: 2}
# users 1-3 and the items they were scored on; the filler user 9 carries the other rows
OWN = {1: {10, 11}, 2: {10, 11, 12, 13, 14, 15}, 3: {17}}
N = 3


def _rows():
    rows = []
    for item, count in COUNTS.items():
        users = sorted(u for u, items in OWN.items() if item in items)
        users += [9] * (count - len(users))
        rows += [row(f"r{item}-{n}", 40.0, user=u, item=item) for n, u in enumerate(users)]
    return rows


@pytest.fixture(scope="module")
def mined(spark, tmp_path_factory):
    root = write_logs(tmp_path_factory.mktemp("popular-logs"), _rows())
    logs = read_window_spark(spark, str(root), Interval(T0, END))
    return mined_in_memory(spark, logs, END, MineConfig(lookback=timedelta(days=28)))


def _popular(spark, mined, sources) -> dict[int, list[int]]:
    config = SpeculateConfig(budget_per_user=N, popular_n=N, sources=sources)
    found = gather(spark, mined, config)
    try:
        rows = found.pairs.filter("array_contains(sources, 'popular')").collect()
    finally:
        for frame in found.cached:
            frame.unpersist()
    out = {}
    for r in rows:
        out.setdefault(r.user_id, []).append(r.item_id)
    return {user: sorted(items) for user, items in out.items()}


def test_without_repeats_every_user_gets_the_same_head(spark, mined):
    head = sorted(COUNTS, key=lambda i: -COUNTS[i])[:N]
    assert _popular(spark, mined, ("popular",)) == {u: head for u in (1, 2, 3, 9)}


def test_with_repeats_each_user_gets_the_most_popular_items_new_to_them(spark, mined):
    ranked = sorted(COUNTS, key=lambda i: -COUNTS[i])
    got = _popular(spark, mined, ("repeat", "popular"))
    # each user walks the whole ranking: user 2 (scored on the six most popular) still gets the
    # two items left; the filler user 9 was scored on every item and gets none
    expected = {user: [i for i in ranked if i not in OWN.get(user, set(COUNTS))][:N]
                for user in (1, 2, 3, 9)}
    assert got == {user: sorted(items) for user, items in expected.items() if items}
    assert got[2] == [16, 17]


def _measure_rows():
    """Item 1: ten rows 25 days before the end; item 2: four rows 4 days before; item 3: two
    rows 2 hours before; item 4: one row from each of users 1-20 a day before (so they are known
    and item 4, the most popular by every measure, is not new to them). New to users 1-20, the
    whole window's rows rank item 1 first, the 7-day rows item 2, the decayed counts item 3."""
    rows = [row(f"a{n}", 5 * 24.0, user=50 + n, item=1) for n in range(10)]
    rows += [row(f"b{n}", 26 * 24.0, user=60 + n, item=2) for n in range(4)]
    rows += [row(f"c{n}", 30 * 24.0 - 2, user=70 + n, item=3) for n in range(2)]
    rows += [row(f"d{u}", 29 * 24.0, user=u, item=4) for u in range(1, 21)]
    return rows


@pytest.fixture(scope="module")
def measured(spark, tmp_path_factory):
    from solaris_lib.speculation.candidates import live_items, seen_lists

    end = T0 + timedelta(days=30)
    root = write_logs(tmp_path_factory.mktemp("measures"), _measure_rows())
    logs = read_window_spark(spark, str(root), Interval(end - timedelta(days=28), end))
    past = mined_in_memory(spark, logs, end, MineConfig(lookback=timedelta(days=28)))
    config = SpeculateConfig(budget_per_user=1, popular_n=1, live_window=timedelta(days=30))
    live, seen = live_items(past, config).cache(), seen_lists(past)
    yield past, live, seen, config
    for frame in (live, seen):
        frame.unpersist()
    past.release()


def _choose(spark, measured, labels, with_seen: bool = True):
    from solaris_lib.speculation.popular import choose_measure

    past, live, seen, config = measured
    frame = spark.createDataFrame(labels, "user_id long, item_id long")
    return choose_measure(past, frame, live, seen if with_seen else None, config)


def test_a_measure_that_covers_clearly_more_replaces_the_window_counts(spark, measured):
    # after the end every user 1-20 is scored on item 2, the 7-day list's item
    measure, coverage = _choose(spark, measured, [(u, 2) for u in range(1, 21)])
    assert measure == "short"
    assert coverage == pytest.approx({"lookback": 0.0, "short": 1.0, "decayed": 0.0})


def test_within_the_noise_the_window_counts_stay(spark, measured):
    # 11 rows on the 7-day list's item against 9 on the window's: 2 more, noise 2 sqrt(20) ~ 9
    labels = [(u, 2) for u in range(1, 12)] + [(u, 1) for u in range(12, 21)]
    measure, coverage = _choose(spark, measured, labels)
    assert measure == "lookback"
    assert coverage == pytest.approx({"lookback": 9 / 20, "short": 11 / 20, "decayed": 0.0})


def test_without_the_repeat_source_every_list_is_the_global_head(spark, measured):
    # item 4 leads every measure: without seen lists it is everyone's one item, by any measure
    labels = [(u, 4) for u in range(1, 11)] + [(u, 2) for u in range(11, 21)]
    measure, coverage = _choose(spark, measured, labels, with_seen=False)
    assert measure == "lookback"
    assert coverage == pytest.approx({"lookback": 0.5, "short": 0.5, "decayed": 0.5})
