"""Fallback clusters: deterministic, complete, medoids are members, popularity buckets."""

import numpy as np
import pytest

pytest.importorskip("faiss")

from solaris_lib.transfer.fallback import (  # noqa: E402
    NO_CLUSTER,
    build_item_clusters,
    cluster_pairs,
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
    clusters = build_item_clusters(ids, x, seen, pop, k=3, buckets=2, seed=5)
    assert clusters.factor_clusters == 3
    assert len(clusters.representatives) == 5
    got = clusters.lookup(np.array([1000, 5000, 5003, 999999]))
    assert got[0] in range(3) and got[1] == 3 and got[2] == 4 and got[3] == NO_CLUSTER
    again = build_item_clusters(ids, x, seen, pop, k=3, buckets=2, seed=5)
    np.testing.assert_array_equal(clusters.cluster_ids, again.cluster_ids)
    np.testing.assert_array_equal(clusters.representatives, again.representatives)
    # every representative belongs to its own cluster
    np.testing.assert_array_equal(clusters.lookup(clusters.representatives),
                                  np.arange(len(clusters.representatives)))


def test_cluster_pairs_is_every_user_with_every_cluster():
    ids, x = _blobs()
    clusters = build_item_clusters(ids, x, ids[:0], np.zeros(0), k=3, buckets=2, seed=5)
    users, cl = cluster_pairs(np.array([7, 3, 7]), clusters)
    np.testing.assert_array_equal(users, [3, 3, 3, 7, 7, 7])
    np.testing.assert_array_equal(cl, [0, 1, 2, 0, 1, 2])
