"""The FAISS index against a brute-force reference: exact below the threshold, tuned IVF above."""

import numpy as np
import pytest

from solaris_lib.speculation.faiss_index import (
    RECALL_TARGET,
    _nearest_rows,
    build_index,
    exact_top_k,
    load_index,
    recall_at_k,
)


def _data(n=3000, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)).astype(np.float32),
            rng.normal(size=(200, d)).astype(np.float32), np.arange(n, dtype=np.int64) * 7 + 3)


def test_exact_top_k_matches_sorting():
    vectors, queries, _ = _data(n=50)
    top = exact_top_k(vectors, queries[:3], 5)
    for q, row in zip(queries[:3], top, strict=True):
        assert list(row) == list(np.argsort(-(vectors @ q), kind="stable")[:5])


def test_recall_counts_shared_ids():
    assert recall_at_k(np.array([[1, 2, -1]]), np.array([[2, 3, 1]])) == pytest.approx(2 / 3)


def test_flat_index_is_exact_with_ids():
    vectors, queries, ids = _data(n=500)
    built = build_index(ids, vectors, exact_threshold=1000, k=10)
    assert (built.kind, built.recall) == ("flat", None)
    _, found = load_index(built.blob, built.nprobe).search(queries, 10)
    assert (found == ids[exact_top_k(vectors, queries, 10)]).all()


def test_ivf_index_reaches_recall_target():
    vectors, queries, ids = _data()
    built = build_index(ids, vectors, exact_threshold=1000, k=20, queries=queries)
    assert built.kind == "ivf" and built.recall >= RECALL_TARGET
    _, found = load_index(built.blob, built.nprobe).search(queries, 20)
    assert recall_at_k(found, ids[exact_top_k(vectors, queries, 20)]) >= RECALL_TARGET - 0.02


def test_nearest_rows_skip_each_users_seen_items_and_keep_k():
    import pandas as pd

    frame = pd.DataFrame({"user_id": [10, 11, 12], "seen": [[5, 7], None, [1, 2, 3, 4]]})
    found = np.array([[5, 6, 7, 8], [9, 8, -1, -1], [1, 2, 3, 4]])
    scores = -np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = _nearest_rows(frame, scores, found, k=2)
    assert rows[["user_id", "item_id", "faiss_rank"]].values.tolist() == [
        [10, 6, 1], [10, 8, 2], [11, 9, 1], [11, 8, 2]]
    assert rows["faiss_score"].tolist() == [-1.0, -3.0, -4.0, -5.0]
    plain = _nearest_rows(frame.drop(columns="seen"), scores, found, k=3)
    assert plain.groupby("user_id").size().to_dict() == {10: 3, 11: 2, 12: 3}


def test_recall_queries_are_fetched_for_an_ivf_index_only():
    """The speculate job collects its recall queries from Spark: an exact index, which
    measures no recall, never asks for them."""
    vectors, queries, ids = _data()
    calls = []

    def fetch():
        calls.append(1)
        return queries

    assert build_index(ids, vectors, exact_threshold=len(ids), k=10, queries=fetch).kind == "flat"
    assert calls == []
    built = build_index(ids, vectors, exact_threshold=1000, k=20, queries=fetch)
    assert built.kind == "ivf" and built.recall >= RECALL_TARGET and calls == [1]
