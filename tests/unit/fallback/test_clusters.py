"""Item clusters: deterministic, complete, medoids are members, popularity buckets, lookups."""

import numpy as np
import pytest

pytest.importorskip("faiss")

from solaris_lib.fallback import NO_CLUSTER  # noqa: E402
from solaris_lib.fallback.clusters import (  # noqa: E402
    build_item_clusters,
    kmeans_clusters,
    popularity_clusters,
)


def _blobs(seed=0, per=20):
    """Three well-separated blobs of 4-d factors: the clustering is unambiguous."""
    rng = np.random.default_rng(seed)
    centres = np.array([[10, 0, 0, 0], [0, 10, 0, 0], [0, 0, 10, 0]], np.float32)
    x = np.concatenate([c + rng.normal(0, 0.1, (per, 4)) for c in centres]).astype(np.float32)
    ids = np.arange(1000, 1000 + 3 * per, dtype=np.int64)
    return ids, x


def test_kmeans_is_deterministic_and_independent_of_input_order():
    ids, x = _blobs()
    a = kmeans_clusters(ids, x, 3, seed=5)
    perm = np.random.default_rng(1).permutation(len(ids))
    b = kmeans_clusters(ids[perm], x[perm], 3, seed=5)
    for left, right in zip(a, b, strict=True):
        np.testing.assert_array_equal(left, right)


def test_kmeans_recovers_the_blobs_and_medoids_are_nearest_members():
    ids, x = _blobs()
    sorted_ids, cluster, medoids = kmeans_clusters(ids, x, 3, seed=5)
    for blob in range(3):
        members = cluster[blob * 20:(blob + 1) * 20]
        assert len(set(members.tolist())) == 1  # each blob is one cluster
    assert len(set(cluster.tolist())) == 3
    for c, medoid in enumerate(medoids):
        members = np.flatnonzero(cluster == c)
        centre = x[members].mean(0)
        nearest = members[np.argmin(((x[members] - centre) ** 2).sum(1))]
        assert medoid == sorted_ids[nearest]


def test_popularity_buckets_are_quantiles_and_representatives_are_medians():
    ids = np.array([50, 10, 40, 20, 30, 60, 70, 80], np.int64)
    pop = np.array([5, 1, 4, 2, 3, 6, 7, 8])
    out_ids, cluster, reps = popularity_clusters(ids, pop, buckets=2, offset=7)
    np.testing.assert_array_equal(out_ids, np.sort(ids))
    # by popularity: 10,20,30,40 | 50,60,70,80 -> clusters 7 and 8
    np.testing.assert_array_equal(cluster, [7, 7, 7, 7, 8, 8, 8, 8])
    np.testing.assert_array_equal(reps, [30, 70])


def test_item_clusters_cover_factor_and_new_items_and_lookup():
    ids, x = _blobs()
    seen = np.array([1000, 1001, 5000, 5001, 5002, 5003], np.int64)  # 500x: no factor
    pop = np.array([9, 9, 1, 2, 3, 4])
    clusters, reps = build_item_clusters(ids, x, seen, pop, k=3, buckets=2, seed=5)
    assert len(reps) == 5
    np.testing.assert_array_equal(clusters.item_ids, np.union1d(ids, seen))
    np.testing.assert_array_equal(np.unique(clusters.of(ids)), [0, 1, 2])  # k-means: 0..k-1
    got = clusters.of(np.array([1000, 5000, 5003, 999999]))
    assert got[0] in range(3) and got[1] == 3 and got[2] == 4 and got[3] == NO_CLUSTER
    again, again_reps = build_item_clusters(ids, x, seen, pop, k=3, buckets=2, seed=5)
    np.testing.assert_array_equal(clusters.cluster_ids, again.cluster_ids)
    np.testing.assert_array_equal(reps, again_reps)
    # every representative belongs to its own cluster
    np.testing.assert_array_equal(clusters.of(reps), np.arange(len(reps)))


def test_lookup_of_unknown_items_and_an_empty_table():
    ids, x = _blobs()
    clusters, _ = build_item_clusters(ids, x, ids[:0], np.zeros(0), k=3, buckets=2, seed=5)
    big = np.iinfo(np.int64).max
    np.testing.assert_array_equal(clusters.of(np.array([-5, 999, big])), [NO_CLUSTER] * 3)
    found, distinct = clusters.fields(np.array([ids[0], big, ids[-1]]))
    assert found[1] == NO_CLUSTER and distinct.tolist() == sorted({found[0], found[2]})
    empty = type(clusters)(np.zeros(0, np.int64), np.zeros(0, np.int32))
    np.testing.assert_array_equal(empty.of(np.array([1, 2])), [NO_CLUSTER] * 2)
