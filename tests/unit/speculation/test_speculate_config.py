"""SpeculateConfig: which runs need retrieval factors, which rankings and sources it accepts."""

import pytest

from solaris_lib.errors import ConfigError
from solaris_lib.speculation.config import SpeculateConfig, speculate_config
from solaris_lib.speculation.evaluate import EvalRequest
from solaris_lib.speculation.selection import RANKINGS, rankings_of


@pytest.mark.parametrize("scorer,sources,needs", [
    ("auto", ("repeat", "popular"), True),  # the learned scorer's features use the factors
    ("popular", ("repeat", "popular"), False),
    ("heuristic", ("repeat", "popular", "cooccurrence"), False),
    ("heuristic", ("repeat", "item_faiss"), True),
    ("repeat", ("repeat", "faiss"), True),
])
def test_factors_follow_the_sources_and_the_scorer(scorer, sources, needs):
    assert SpeculateConfig(scorer=scorer, sources=sources).uses_factors() is needs


def test_the_eval_request_carries_its_sources_to_the_run():
    from datetime import UTC, datetime, timedelta

    request = EvalRequest("logs", datetime(2026, 1, 12, tzinfo=UTC), timedelta(days=7),
                          timedelta(days=28), budget_per_user=5, scorer="popular",
                          sources=("repeat", "popular"))
    assert request.speculate().sources == ("repeat", "popular")
    assert not request.speculate().uses_factors()


def test_rankings_follow_the_sources_and_unknown_names_are_refused():
    config = SpeculateConfig(sources=("repeat", "popular", "miss"))
    assert rankings_of(config, learned=True) == ("learned", "heuristic", "repeat", "popular")
    assert rankings_of(config, learned=False) == ("heuristic", "repeat", "popular")
    assert all(SpeculateConfig(scorer=name).scorer == name for name in RANKINGS)
    with pytest.raises(ConfigError, match="scorer"):
        speculate_config(scorer="best")
    with pytest.raises(ConfigError, match="sources"):
        speculate_config(sources=("repeat", "trending"))
    with pytest.raises(ConfigError, match="popular_by"):
        speculate_config(popular_by=("weekly",))
