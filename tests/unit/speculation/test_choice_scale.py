"""benchmarks/choice_scale.py: the planted world, the quality figures it reports, its last line."""

import importlib.util
import json
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "choice_scale.py"
_SPEC = importlib.util.spec_from_file_location("choice_scale", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _world():
    return bench.planted(n_users=80, n_items=400, rows_per_user=60, groups=4, own_share=0.9,
                         seed=3)


def test_the_planted_world_is_indexed_by_the_catalogue():
    (users, items, weight), (test_users, test_items), user_group, item_group = _world()
    assert len(users) == len(items) == len(weight) and (weight >= 1).all()
    assert len(np.unique(np.stack([users, items]), axis=1)[0]) == len(users)  # distinct pairs
    assert set(np.unique(items)) == set(range(len(item_group)))  # every item has a train row
    assert (test_items >= 0).all() and test_items.max() < len(item_group)
    assert users.max() < len(user_group) and test_users.max() < len(user_group)
    own = item_group[items] == user_group[users]
    assert np.average(own, weights=weight) > 0.85  # 90 % of the rows from the user's group


def test_vectors_that_know_the_groups_rank_every_pair_right():
    train, test, user_group, item_group = _world()
    x, y = np.eye(4)[user_group], np.eye(4)[item_group]
    figures = bench.quality(x, y, np.zeros(len(y)), train, test, user_group, item_group, seed=1)
    assert figures["pairwise_accuracy"] == 1.0
    noise = np.random.default_rng(0).normal(size=y.shape)
    blind = bench.quality(x, noise, np.zeros(len(y)), train, test, user_group, item_group, seed=1)
    assert 0.3 < blind["pairwise_accuracy"] < 0.7  # vectors that know nothing: chance
    assert 0.0 <= figures["popularity_recall_at_100"] <= 1.0


def test_the_last_line_compares_the_sampled_softmax_with_the_full_one(capsys):
    assert bench.main(["--users", "60", "--groups", "4", "--compare-items", "300",
                       "--scale-items", "", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["softmax"] for r in report["runs"]] == ["full", "sampled"]
    full, sampled = report["runs"]
    assert full["pairs"] == sampled["pairs"] and full["catalogue"] == sampled["catalogue"]
    assert full["pairwise_accuracy"] > 0.8 and sampled["pairwise_accuracy"] > 0.8
    compared = report["sampled_vs_full"]
    assert compared["items"] == 300 and compared["time_ratio"] > 0
    assert abs(compared["accuracy_delta"]) < 0.2  # both softmaxes place the planted tastes
