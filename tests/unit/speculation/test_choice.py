"""The choice model's fit (torch, no Spark): planted tastes are recovered, chunking changes
nothing, bad input is refused. The Spark path is tested in tests/integration/speculation."""

import numpy as np
import pytest

from solaris_lib.speculation.choice import fit_choice
from solaris_lib.speculation.config import RetrievalConfig

GROUPS, USERS_PER_GROUP, ITEMS_PER_GROUP = 3, 12, 10


def _planted(seed: int = 0):
    """Users of group g are scored only on items of group g (each on 6 of its 10 items, with
    counts 1-4): (users, items, weight, shape, user group, item group)."""
    rng = np.random.default_rng(seed)
    users, items, weight = [], [], []
    for u in range(GROUPS * USERS_PER_GROUP):
        group = u // USERS_PER_GROUP
        for i in rng.choice(ITEMS_PER_GROUP, 6, replace=False):
            users.append(u)
            items.append(group * ITEMS_PER_GROUP + i)
            weight.append(float(rng.integers(1, 5)))
    shape = (GROUPS * USERS_PER_GROUP, GROUPS * ITEMS_PER_GROUP)
    return (np.array(users), np.array(items), np.array(weight), shape,
            np.arange(shape[0]) // USERS_PER_GROUP, np.arange(shape[1]) // ITEMS_PER_GROUP)


def test_planted_groups_are_recovered():
    users, items, weight, shape, user_group, item_group = _planted()
    x, y, b = fit_choice(users, items, weight, shape, RetrievalConfig(choice_dim=4))
    assert x.shape == (shape[0], 4) and y.shape == (shape[1], 4) and b.shape == (shape[1],)
    score = x @ y.T
    same = user_group[:, None] == item_group[None, :]
    seen = np.zeros(shape, bool)
    seen[users, items] = True
    ordered = []
    for u in range(shape[0]):
        # the items of the user's group never scored for them rank above the other groups'
        unseen, other = score[u][same[u] & ~seen[u]], score[u][~same[u]]
        assert unseen.mean() > other.mean() + 1.0
        ordered.append((unseen[:, None] > other[None, :]).mean())
    assert np.mean(ordered) > 0.9
    unit = y / np.linalg.norm(y, axis=1, keepdims=True)
    cosine = unit @ unit.T
    off_diagonal = ~np.eye(shape[1], dtype=bool)
    within = cosine[(item_group[:, None] == item_group[None, :]) & off_diagonal]
    across = cosine[item_group[:, None] != item_group[None, :]]
    assert within.mean() > 0.5 > 0.0 > across.mean()


def test_chunking_does_not_change_the_fit():
    users, items, weight, shape, _, _ = _planted(seed=1)
    config = RetrievalConfig(choice_dim=4, choice_steps=40)
    whole = fit_choice(users, items, weight, shape, config)
    # 7 logits per chunk: one user (30 items) per chunk, 36 chunks
    chunked = fit_choice(users, items, weight, shape, config.model_copy(
        update={"choice_chunk_cells": 7}))
    for a, b in zip(whole, chunked, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_same_seed_same_vectors_other_seed_other_vectors():
    users, items, weight, shape, _, _ = _planted()
    config = RetrievalConfig(choice_dim=4, choice_steps=20)
    first = fit_choice(users, items, weight, shape, config)
    again = fit_choice(users, items, weight, shape, config)
    other = fit_choice(users, items, weight, shape, config.model_copy(update={"seed": 8}))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.allclose(first[1], other[1])


def test_no_weight_is_refused():
    with pytest.raises(ValueError, match="at least one pair"):
        fit_choice(np.array([0]), np.array([0]), np.array([0.0]), (1, 1), RetrievalConfig())
    with pytest.raises(ValueError, match="at least one pair"):
        fit_choice(np.zeros(0, int), np.zeros(0, int), np.zeros(0), (0, 0), RetrievalConfig())


def _rank_quality(x, y, users, items, shape, user_group, item_group) -> float:
    """Mean share of (unseen same-group item, other-group item) pairs each user ranks right."""
    score = x @ y.T
    same = user_group[:, None] == item_group[None, :]
    seen = np.zeros(shape, bool)
    seen[users, items] = True
    return float(np.mean([(score[u][same[u] & ~seen[u]][:, None] > score[u][~same[u]][None, :])
                          .mean() for u in range(shape[0])]))


def test_a_sampled_softmax_beyond_the_full_threshold_recovers_the_groups():
    users, items, weight, shape, user_group, item_group = _planted()
    config = RetrievalConfig(choice_dim=4, choice_full_items=10, choice_negatives=12)
    x, y, b = fit_choice(users, items, weight, shape, config)
    assert x.shape == (shape[0], 4) and y.shape == (shape[1], 4) and b.shape == (shape[1],)
    assert _rank_quality(x, y, users, items, shape, user_group, item_group) > 0.9


def test_sampled_softmax_chunking_does_not_change_the_fit():
    users, items, weight, shape, _, _ = _planted(seed=2)
    config = RetrievalConfig(choice_dim=4, choice_steps=30, choice_full_items=10,
                             choice_negatives=12)
    whole = fit_choice(users, items, weight, shape, config)
    # 12 sampled logits per user: one user per chunk
    chunked = fit_choice(users, items, weight, shape, config.model_copy(
        update={"choice_chunk_cells": 12}))
    for a, b in zip(whole, chunked, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
