"""benchmarks/oracle_features.py's log-based pieces: the short query and the request PPMI."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "oracle_features.py"
_SPEC = importlib.util.spec_from_file_location("oracle_features", _PATH)
oracle = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(oracle)


def test_query_feature_is_the_decayed_mean_of_the_users_item_vectors():
    # user 1 saw item 10 now and item 11 six hours ago (half the weight); user 2 only item 11
    history = pd.DataFrame({"user_id": [1, 1, 2], "item_id": [10, 11, 11],
                            "age_h": [0.0, 6.0, 1.0], "request_id": ["a", "b", "c"]})
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    index = pd.Index([10, 11, 12])
    cand = pd.DataFrame({"user_id": [1, 1, 2, 3], "item_id": [12, 11, 10, 10]})
    got = oracle._query_feature(history, vectors, index, cand)
    query = np.array([1.0, 0.5]) / np.hypot(1.0, 0.5)
    assert got[0] == pytest.approx(query @ np.array([1.0, 1.0]) / np.sqrt(2))
    assert got[1] == pytest.approx(query @ np.array([0.0, 1.0]))
    assert got[2] == pytest.approx(0.0)  # user 2's query is item 11's direction, orthogonal
    assert got[3] == 0.0  # a user with no history


def test_request_ppmi_separates_items_that_never_share_a_request():
    rng = np.random.default_rng(5)
    rows = []
    for request in range(400):
        group = request % 2  # items 0-29 or 30-59
        for item in rng.choice(30, 8, replace=False) + 30 * group:
            rows.append((f"r{request}", int(item)))
    history = pd.DataFrame(rows, columns=["request_id", "item_id"])
    embeddings, items = oracle._request_ppmi(history)
    assert embeddings.shape == (60, oracle.PPMI_RANK)
    unit = oracle._unit(embeddings)
    cosine = unit @ unit.T
    same = np.equal.outer(items.to_numpy() // 30, items.to_numpy() // 30)
    off_diagonal = ~np.eye(60, dtype=bool)
    assert cosine[same & off_diagonal].mean() > 0.25
    assert np.abs(cosine[~same]).mean() < 0.05
    nearest = np.where(off_diagonal, cosine, -2.0).argmax(axis=1)
    assert (items.to_numpy()[nearest] // 30 == items.to_numpy() // 30).all()
