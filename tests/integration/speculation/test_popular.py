"""The popular source: the most popular live items, new to each user when repeats are on."""

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
    # new items come from the 2N most popular only: user 2 (scored on all six) and the filler
    # user 9 (scored on every item) get none
    expected = {1: [12, 13, 14], 3: [10, 11, 12]}
    for user, items in OWN.items():
        assert expected.get(user, []) == sorted([i for i in ranked[:2 * N] if i not in items][:N])
    assert got == expected
