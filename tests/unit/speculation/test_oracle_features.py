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


def test_horizon_means_of_liveness_and_ramp():
    from types import SimpleNamespace

    from solaris_lib.simulate.config import WorldConfig
    from solaris_lib.simulate.entities import Items

    # item 0 launched at hour 0 and ends at hour 50; item 1 launched long before, never ends
    items = Items(item_id=np.array([1, 2]), category=np.zeros(2, np.int32),
                  vector=np.ones((2, 2), np.float32), popularity=np.ones(2),
                  quality=np.zeros(2, np.float32), start_hour=np.array([0, -1000]),
                  end_hour=np.array([50, 10_000]))
    sim = SimpleNamespace(cfg=WorldConfig(ramp_up_hours=100.0), items=items)
    live, ramp = oracle._horizon_means(sim, np.arange(40, 60))
    assert live == pytest.approx([0.5, 1.0])  # hours 40-49 of 40-59
    assert ramp == pytest.approx([np.mean(np.arange(41, 61)) / 100, 1.0])  # (h + 1) / 100
