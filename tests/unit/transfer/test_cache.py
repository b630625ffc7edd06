"""Cache membership and levels with realistic (large, 64-bit) ids."""

from datetime import UTC, datetime, timedelta

import numpy as np

from solaris_lib.intervals import Interval
from solaris_lib.transfer.cache import CLUSTER, EXACT, ITEM, MISS, ServedCache
from solaris_lib.transfer.fallback import ItemClusters

T0 = datetime(2026, 1, 6, tzinfo=UTC)


def _cache(users, items, clusters=None):
    order = np.lexsort((items, users))
    users, items = np.asarray(users, np.int64)[order], np.asarray(items, np.int64)[order]
    return ServedCache(Interval(T0, T0 + timedelta(hours=6)), users, items, np.unique(users),
                       clusters, "heuristic")


def test_membership_with_ids_near_int64_max():
    big = np.iinfo(np.int64).max
    users = [7982396026, 7982396026, big - 1, 5]
    items = [170294151637, big, 3, 2**62]
    cache = _cache(users, items)
    assert cache.has_pair(np.array(users), np.array(items)).all()
    swapped = cache.has_pair(np.array([7982396026, big - 1, 5, 6]),
                             np.array([3, 170294151637, 2**62 + 1, 2**62]))
    assert not swapped.any()


def test_levels_exact_cluster_item_miss():
    items = np.array([10, 20, 30, 40], np.int64)
    clusters = ItemClusters(items, np.array([0, 0, 1, 1], np.int32), np.array([10, 30]), 2)
    cache = _cache([1, 1, 2], [10, 30, 20], clusters)
    # user 3 was not speculated: its live items get the ITEM level, its unknown item 99 misses
    level, cluster = cache.levels(np.array([1, 1, 2, 3, 1, 3]),
                                  np.array([10, 40, 20, 10, 99, 99]), fallback=True)
    np.testing.assert_array_equal(level, [EXACT, CLUSTER, EXACT, ITEM, MISS, MISS])
    np.testing.assert_array_equal(cluster, [0, 1, 0, 0, -1, -1])
    no_fb, _ = cache.levels(np.array([1, 1, 3]), np.array([10, 40, 10]), fallback=False)
    np.testing.assert_array_equal(no_fb, [EXACT, MISS, MISS])
