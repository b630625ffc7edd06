"""The numpy selection mirrors apply_budgets' rule; choosing a ranking by rows covered."""

import numpy as np
import pytest

from solaris_lib.speculation.selection import (
    Budget,
    choose,
    per_user_rank,
    pools,
    select,
    selections,
)


def _reference(pairs, per_user, total):
    """apply_budgets written out: per user (score desc, item asc) the first ``per_user``, then
    overall (score desc, user asc, item asc) the first ``total``; NaN scores never kept."""
    by_user = {}
    for user, item, score in pairs:
        if not np.isnan(score):
            by_user.setdefault(user, []).append((user, item, score))
    kept = []
    for rows in by_user.values():
        kept += sorted(rows, key=lambda r: (-r[2], r[1]))[:per_user]
    if total is not None:
        kept = sorted(kept, key=lambda r: (-r[2], r[0], r[1]))[:total]
    return {(u, i) for u, i, _ in kept}


@pytest.mark.parametrize("per_user,total", [(3, None), (2, 7), (5, 4), (1, 100)])
def test_select_matches_the_written_out_rule_with_ties_and_gaps(per_user, total):
    rng = np.random.default_rng(per_user * 10 + (total or 0))
    user = rng.integers(0, 6, 80)
    item = rng.integers(100, 130, 80)
    _, first = np.unique(np.stack([user, item], 1), axis=0, return_index=True)
    user, item = user[first], item[first]
    score = rng.integers(0, 4, len(user)).astype(float)  # many ties
    score[rng.random(len(user)) < 0.2] = np.nan
    mask = select(user, item, score, Budget(per_user, total))
    got = set(zip(user[mask].tolist(), item[mask].tolist(), strict=True))
    assert got == _reference(zip(user.tolist(), item.tolist(), score.tolist(), strict=True),
                             per_user, total)


def test_per_user_rank_counts_from_one_within_each_user():
    user = np.array([5, 5, 5, 2, 2, 9])
    item = np.array([10, 11, 12, 10, 11, 3])
    score = np.array([0.2, 0.9, 0.2, np.nan, 1.0, 0.0])
    assert per_user_rank(user, item, score).tolist() == [2, 1, 3, 0, 1, 1]


def test_scaled_budget_keeps_the_cap_and_scales_the_total():
    assert Budget(10, 600).scaled(50, 100) == Budget(10, 300)
    assert Budget(10).scaled(50, 100) == Budget(10)


def test_selections_cap_the_faiss_rankings_at_their_depth():
    import pandas as pd

    frame = pd.DataFrame({
        "user_id": [1, 1, 1, 2], "item_id": [1, 2, 3, 1], "rows": [1.0, 4.0, 2.0, 3.0],
        "score_faiss": [0.9, 0.8, 0.7, 0.1], "score_repeat": [np.nan, 0.5, 0.6, 0.2],
    })
    assert pools(1)["faiss"] == 1
    rows, masks = selections(frame, Budget(2), ("faiss", "repeat"), faiss_count=1)
    assert masks["faiss"].tolist() == [True, False, False, True]
    assert masks["repeat"].tolist() == [False, True, True, True]
    assert rows.tolist() == [1.0, 4.0, 2.0, 3.0]


def _masks(n, **kept):
    return {name: np.isin(np.arange(n), idx) for name, idx in kept.items()}


def test_popularity_stays_unless_a_ranking_covers_clearly_more():
    rows = np.ones(400)
    # popular covers 100 rows; learned 110: 60 rows of its own against 50 of popular's alone
    # (10 more, noise 2 sqrt(110) = 21); faiss 104 with 84 of its own against 80: both stay out
    masks = _masks(400, popular=np.arange(100), faiss=np.r_[np.arange(20), np.arange(300, 384)],
                   learned=np.r_[np.arange(50, 100), np.arange(100, 160)])
    kept, coverage, margins = choose(rows, masks, 400.0)
    assert kept == "popular"
    assert coverage == {"learned": 110 / 400, "popular": 0.25, "faiss": 104 / 400}
    assert margins["learned"] == pytest.approx(10 / (2 * np.sqrt(110)))
    assert margins["faiss"] == pytest.approx(4 / (2 * np.sqrt(164)))
    # learned 160: 110 of its own against 50 (60 more, noise 2 sqrt(160) = 25): learned
    masks["learned"] = np.isin(np.arange(400), np.r_[np.arange(50, 100), np.arange(100, 210)])
    assert choose(rows, masks, 400.0)[0] == "learned"
    # faiss 200, clear of popular too and above learned: faiss
    masks["faiss"] = np.isin(np.arange(400), np.arange(200, 400))
    assert choose(rows, masks, 400.0)[0] == "faiss"


def test_without_popularity_the_best_single_source_is_the_default():
    rows = np.ones(10)
    masks = _masks(10, faiss=np.arange(5), repeat=np.arange(5, 10), learned=np.arange(6))
    kept, _, margins = choose(rows, masks, 10.0)
    assert kept == "repeat"  # the tie goes to the earlier ranking; learned's one row is noise
    assert set(margins) == {"faiss", "learned"}
