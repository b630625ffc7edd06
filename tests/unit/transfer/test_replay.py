"""The served cache: lookups with realistic (large, 64-bit) ids, each row's level by the client's
rule and its value from that level's table."""

from datetime import UTC, datetime, timedelta

import numpy as np

from solaris_lib.fallback import ItemClusters, Level
from solaris_lib.intervals import Interval
from solaris_lib.transfer.replay import KeyedValues, ServedCache

T0 = datetime(2026, 1, 6, tzinfo=UTC)
BIG = np.iinfo(np.int64).max


def _values(*keys) -> np.ndarray:
    """(n, 2) float16: one distinct vector per key."""
    return np.array([[k, k + 0.5] for k in range(len(keys))], np.float16) + 100 * len(keys)


def _cache(exact, cluster=None, priors=None, clusters=None):
    users, items = (np.array(c, np.int64) for c in zip(*exact, strict=True))
    tables = [KeyedValues.of(users, items, _values(*exact))]
    if cluster is not None:
        cu, cc = (np.array(c, np.int64) for c in zip(*cluster, strict=True))
        tables.append(KeyedValues.of(cu, cc, _values(*cluster) + 1000))
        p = np.array(priors, np.int64)
        tables.append(KeyedValues.of(p, np.zeros(len(p), np.int64), _values(*p) + 2000))
    else:
        tables += [None, None]
    return ServedCache(Interval(T0, T0 + timedelta(hours=6)), *tables, clusters,
                       np.unique(users), "heuristic")


def test_exact_lookups_with_ids_near_int64_max():
    pairs = [(7982396026, 170294151637), (7982396026, BIG), (BIG - 1, 3), (5, 2**62)]
    cache = _cache(pairs)
    users, items = (np.array(c, np.int64) for c in zip(*pairs, strict=True))
    level, emb = cache.lookup(users[::-1], items[::-1])
    assert (level == Level.EXACT).all()
    np.testing.assert_array_equal(emb, _values(*pairs)[::-1].astype(np.float32))
    swapped, _ = cache.lookup(np.array([7982396026, BIG - 1, 5, 6]),
                              np.array([3, 170294151637, 2**62 + 1, 2**62]))
    assert (swapped == Level.MISS).all()


def test_levels_and_values_follow_the_tables():
    clusters = ItemClusters(np.array([10, 20, 30, 40], np.int64), np.array([0, 0, 1, 1], np.int32))
    exact = [(1, 10), (1, 30), (2, 20)]
    cluster = [(1, 0), (1, 1), (2, 0)]  # user 2 has no value for cluster 1
    cache = _cache(exact, cluster, priors=[10, 20, 40], clusters=clusters)
    users = np.array([1, 1, 2, 2, 3, 3, 1, 3])
    items = np.array([10, 40, 20, 30, 10, 30, 99, 99])
    level, emb = cache.lookup(users, items)
    assert level.tolist() == [Level.EXACT, Level.CLUSTER, Level.EXACT, Level.MISS, Level.ITEM,
                              Level.MISS, Level.MISS, Level.MISS]
    exact_v, cluster_v = _values(*exact), _values(*cluster) + 1000
    prior_v = _values(10, 20, 40) + 2000
    want = np.zeros((8, 2), np.float32)
    want[0], want[1], want[2], want[4] = exact_v[0], cluster_v[1], exact_v[2], prior_v[0]
    np.testing.assert_array_equal(emb, want)
    np.testing.assert_array_equal(cache.levels(users, items), level)
    exact_only, emb = cache.lookup(users, items, fallback=False)
    assert exact_only.tolist() == [Level.EXACT if lv == Level.EXACT else Level.MISS
                                   for lv in level]
    assert (emb[exact_only == Level.MISS] == 0).all()
    known_user, known_item = cache.known(users, items)
    assert known_user.tolist() == [True, True, True, True, False, False, True, False]
    assert known_item.tolist() == [True, True, True, True, True, True, False, False]


def test_a_cache_without_fallback_tables_serves_the_exact_level_only():
    cache = _cache([(1, 10)])
    level, _ = cache.lookup(np.array([1, 1, 2]), np.array([10, 20, 10]))
    assert level.tolist() == [Level.EXACT, Level.MISS, Level.MISS]
    assert cache.known(np.array([1, 2]), np.array([10, 10]))[1].tolist() == [False, False]
