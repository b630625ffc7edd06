"""benchmarks/speculation_ceiling.py: the comparison of a run with the ceiling (``gap``) and the
facts a reader of the logs lacks (estimated interests, drawn campaign ends)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "speculation_ceiling.py"
_SPEC = importlib.util.spec_from_file_location("speculation_ceiling", _PATH)
ceiling = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ceiling)


def test_run_selection_keeps_each_users_best_scores_ties_to_the_smaller_item():
    candidates = pd.DataFrame({"user_id": [1, 1, 1, 2, 2], "item_id": [30, 10, 20, 10, 20],
                               "score": [0.5, 0.9, 0.5, 0.1, 0.2]})
    kept = ceiling.run_selection(candidates, 2)
    pairs = sorted(kept[["user_id", "item_id"]].itertuples(index=False, name=None))
    assert pairs == [(1, 10), (1, 20), (2, 10), (2, 20)]


def test_gap_splits_the_shortfall_by_pair_kind_decile_and_pool():
    # 2 users x 4 items, budget 2; item 3 is unseen (the ceiling never keeps it)
    expected = np.array([[5.0, 4.0, 1.0, 9.0], [3.0, 0.0, 2.0, 0.0]])
    actual = np.array([[6.0, 3.0, 1.0, 10.0], [2.0, 0.0, 4.0, 0.0]])
    unseen = np.array([False, False, False, True])
    # the run keeps user 0: items 0, 2 (misses item 1); user 1: items 0, 2 (as the ceiling)
    run = np.array([[True, False, True, False], [True, False, True, False]])
    proposed = np.array([[True, False, True, True], [True, True, True, True]])
    repeat = np.array([[True, False, False, False], [False, False, True, False]])
    decile = np.array([9, 0])
    got = ceiling.gap(expected, actual, unseen, run, proposed, repeat, decile, budget=2)
    total = actual.sum()  # 26
    assert got["ceiling"] == round((6 + 3 + 2 + 4) / total, 4)
    assert got["run"] == round((6 + 1 + 2 + 4) / total, 4)
    assert got["shortfall"] == round((3 - 1) / total, 4)
    assert got["new"] == round((3 - 1) / total, 4) and got["repeat"] == 0.0
    assert got["ceiling_only"] == round(3 / total, 4)
    assert got["ceiling_only_outside_pools"] == round(3 / total, 4)  # item 1 was never proposed
    assert got["run_only"] == round(1 / total, 4)
    deciles = {d["decile"]: d for d in got["by_decile"]}
    assert deciles[9]["rows"] == round(20 / total, 4) and deciles[9]["new"] == round(2 / total, 4)
    assert deciles[0]["rows"] == round(6 / total, 4) and deciles[0]["new"] == 0.0


def test_the_ceiling_never_counts_an_unseen_item_even_when_a_user_has_too_few_seen():
    # budget 3, two seen items: the third pick is the unseen item, which covers nothing
    expected = np.array([[1.0, 2.0, 9.0]])
    actual = np.array([[1.0, 2.0, 7.0]])
    unseen = np.array([False, False, True])
    run = np.array([[True, True, True]])
    everything = np.ones((1, 3), bool)
    got = ceiling.gap(expected, actual, unseen, run, everything, ~everything, np.array([0]), 3)
    assert got["ceiling"] == 0.3 and got["run"] == 1.0 and got["shortfall"] == -0.7


def test_activity_deciles_split_users_evenly_and_mark_users_without_candidates():
    activity = pd.Series(np.arange(20, 0, -1.0), index=np.arange(100, 120))
    user_pos = {100 + k: k for k in range(21)}  # user 120 has no candidates
    decile = ceiling.activity_deciles(activity, user_pos, 21)
    assert np.bincount(decile[:20]).tolist() == [2] * 10
    assert decile[0] == 9 and decile[19] == 0 and decile[20] == -1


def _dump(folder: Path, budget: dict) -> Path:
    (folder / "candidates").mkdir(parents=True)
    pd.DataFrame({"user_id": [1, 1, 1, 2], "item_id": [10, 11, 12, 10],
                  "score": [0.1, 0.9, 0.5, 0.3], "pair_n": [1.0, 0.0, 0.0, 0.0],
                  "user_act": [3.0, 3.0, 3.0, 1.0]}).to_parquet(folder / "candidates" / "p.parquet")
    (folder / "budget.json").write_text(json.dumps(budget))
    return folder


def test_compare_reads_a_dump_onto_the_grid_and_refuses_another_run(tmp_path):
    user_pos, item_pos = {1: 0, 2: 1, 3: 2}, {10: 0, 11: 1, 12: 2, 13: 3}
    dump = _dump(tmp_path / "a", {"budget_per_user": 2, "global_budget": None})
    run, proposed, repeat, decile = ceiling.compare(str(dump), user_pos, item_pos, (3, 4), 2)
    assert run.tolist() == [[False, True, True, False], [True, False, False, False],
                            [False] * 4]
    assert proposed.sum() == 4 and repeat.tolist()[0] == [True, False, False, False]
    assert decile.tolist() == [5, 0, -1]
    with pytest.raises(SystemExit, match="per-user run's dump with budget 3"):
        ceiling.compare(str(dump), user_pos, item_pos, (3, 4), 3)
    other = _dump(tmp_path / "b", {"budget_per_user": 2, "global_budget": 4})
    with pytest.raises(SystemExit, match="per-user run's dump"):
        ceiling.compare(str(other), user_pos, item_pos, (3, 4), 2)
    with pytest.raises(SystemExit, match="another world"):
        ceiling.compare(str(dump), user_pos, {10: 0, 11: 1}, (3, 2), 2)


@pytest.fixture(scope="module")
def small_world(tmp_path_factory):
    """A 300-user, 3-day world on disk and the simulator replayed to its last midnight."""
    from datetime import timedelta

    from solaris_lib.simulate.config import WorldConfig
    from solaris_lib.simulate.world import Simulator

    cfg = WorldConfig(users=300, items=400, days=3, mean_requests_per_user_day=6.0)
    out = tmp_path_factory.mktemp("ceiling") / "logs"
    Simulator(cfg).run(str(out))
    cutoff = cfg.start + timedelta(days=2)
    sim, first_day = ceiling.simulator_at(str(out), cutoff)
    return str(out), cutoff, sim, first_day


def test_interests_estimated_from_the_logs_point_where_the_hidden_ones_do(small_world):
    pytest.importorskip("torch")
    logs, cutoff, sim, _ = small_world
    hidden = sim.users.interest.copy()
    estimate, cosine = ceiling.estimate_interests(sim, logs, cutoff, half_life_h=24.0, steps=100)
    assert np.array_equal(sim.users.interest, hidden)  # the hidden state is left as it was
    seen = np.linalg.norm(estimate, axis=1) > 0
    assert seen.mean() > 0.5 and np.allclose(np.linalg.norm(estimate[seen], axis=1), 1.0)
    own = np.einsum("ud,ud->u", estimate[seen], hidden[seen])
    assert cosine == pytest.approx(np.median(own)) and cosine > 0.8
    other = np.einsum("ud,ud->u", estimate[seen], np.roll(hidden[seen], 1, axis=0))
    assert np.median(other) < 0.5  # another user's interest is not as close


def test_drawn_ends_change_only_the_campaigns_live_at_the_cutoff(small_world):
    from solaris_lib.simulate.entities import MAX_LIFETIME_HOURS

    _, _, sim, first_day = small_world
    hour, before = first_day * 24, sim.items
    future = ceiling.copy.deepcopy(sim)
    ceiling._draw_ends(future, hour, np.random.default_rng(0))
    live = (before.start_hour < hour) & (before.end_hour > hour)
    after = future.items.end_hour
    assert live.sum() > 100 and (after[live] > hour).all()
    lifetime = after[live] - before.start_hour[live]  # the law's clip holds given the age
    assert (lifetime <= MAX_LIFETIME_HOURS).all() and (lifetime == MAX_LIFETIME_HOURS).any()
    assert np.array_equal(after[~live], before.end_hour[~live])
    assert (after[live] != before.end_hour[live]).mean() > 0.9
    assert np.array_equal(sim.items.end_hour, before.end_hour)  # the replayed state is kept
