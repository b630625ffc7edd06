"""Parsing of miss-stream entries and the choice of the scorer's training split."""

from datetime import UTC, datetime, timedelta

import pytest

from solaris_lib.errors import ConfigError
from solaris_lib.speculation.evaluate import EvalRequest, training_split
from solaris_lib.speculation.misses import parse_entry

T = datetime(2026, 1, 12, tzinfo=UTC)


def test_parse_entry_bytes_and_text():
    assert parse_entry({b"user": b"7", b"items": b"3,4", b"ts": b"100"}) == [(7, 3, 100), (7, 4, 100)]
    assert parse_entry({"user": "7", "items": "", "ts": "1"}) == []


@pytest.mark.parametrize("fields", [{b"user": b"x", b"items": b"1", b"ts": b"1"},
                                    {b"items": b"1", b"ts": b"1"}])
def test_malformed_entries_give_no_rows(fields):
    assert parse_entry(fields) == []


def test_split_is_one_horizon_back_when_history_is_long():
    assert training_split(T - timedelta(days=20), T, timedelta(days=7)) == T - timedelta(days=7)


def test_split_is_the_history_midpoint_when_short():
    assert training_split(T - timedelta(days=7), T, timedelta(days=7)) == T - timedelta(days=3.5)


def test_no_split_without_history():
    assert training_split(None, T, timedelta(days=7)) is None
    assert training_split(T - timedelta(minutes=30), T, timedelta(days=7)) is None


def test_request_needs_exactly_one_budget():
    with pytest.raises(ConfigError):
        EvalRequest("x", T, timedelta(days=1), timedelta(days=1))
    with pytest.raises(ConfigError):
        EvalRequest("x", T, timedelta(days=1), timedelta(days=1), budget_per_user=3,
                    budget_factor=2.0)


def test_global_allocation_is_its_own_global_budget():
    with pytest.raises(ConfigError, match="allocation"):
        EvalRequest("x", T, timedelta(days=1), timedelta(days=1), budget_per_user=3,
                    allocation="everyone")
    with pytest.raises(ConfigError, match="global budget"):
        EvalRequest("x", T, timedelta(days=1), timedelta(days=1), budget_per_user=3,
                    allocation="global", global_budget=10)


def test_selection_cap_is_apart_from_the_candidate_pools():
    from solaris_lib.speculation.config import SpeculateConfig

    config = SpeculateConfig(budget_per_user=5, max_per_user=20, global_budget=50)
    assert (config.user_cap(), config.faiss_count(), config.popular_count()) == (20, 5, 5)
    assert SpeculateConfig(budget_per_user=5).user_cap() == 5
    # without a global budget the cap is the budget: max_per_user never raises a user's pairs
    assert SpeculateConfig(budget_per_user=5, max_per_user=20).user_cap() == 5


def test_faiss_pool_depth_reaches_the_config_and_is_checked():
    from solaris_lib.speculation.evaluate import _speculate_config

    with pytest.raises(ConfigError, match="faiss-k"):
        EvalRequest("x", T, timedelta(days=1), timedelta(days=1), budget_per_user=3, faiss_k=-1)
    request = EvalRequest("x", T, timedelta(days=1), timedelta(days=1), budget_per_user=3,
                          faiss_k=12)
    config = _speculate_config(request, 3, known_users=None)
    assert (config.faiss_count(), config.user_cap(), config.popular_count()) == (12, 3, 3)
    default = EvalRequest("x", T, timedelta(days=1), timedelta(days=1), budget_per_user=3)
    assert _speculate_config(default, 3, known_users=None).faiss_count() == 3


@pytest.mark.parametrize("fields, reason", [
    ({b"user": b"\xff", b"items": b"1", b"ts": b"1"}, "undecodable"),
    ({b"user": b"1", b"items": b",".join([b"1"] * 1001), b"ts": b"1"}, "oversized"),
    ({b"user": b"1", b"items": b"1", b"ts": b"1.5"}, "mistyped"),
    ({b"user": b"+1", b"items": b"1", b"ts": b"1"}, "mistyped"),
    ([b"not", b"a dict"], "mistyped"),
])
def test_bad_entries_are_skipped_with_their_reason(fields, reason):
    from solaris_lib.speculation.misses import check_entry

    assert check_entry(fields) == ([], reason)
