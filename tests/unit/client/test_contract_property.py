"""The client's contract under any cache state, over the in-memory transport (the same states
against a real Redis: tests/integration/cache/test_client_property.py): no exception, no call
over its budget, no non-finite value answered, whatever the alias, manifests, chunks and values
hold (tests/cachestates.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from solaris_lib.client import InMemoryRedis, MockTransport, SolarisClient
from tests.cachestates import P, Tally, cache_states, check_contract

STATES = 600


def test_no_state_makes_the_client_raise_block_or_serve_non_finite_values():
    tally = Tally()

    @settings(max_examples=STATES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(state=cache_states())
    def run(state):
        store = InMemoryRedis()
        for command in state:
            store(command)
        check_contract(lambda: SolarisClient.from_url(
            "redis://unused", transport=MockTransport(store), key_prefix=P,
            refresh_interval_s=3600, miss_sample_rate=1.0, max_table_bytes=1 << 20),
            tally, budget_s=2.0)

    run()
    assert tally.states >= STATES
    assert tally.zeros(), (tally.raised[:5], tally.over_budget, tally.non_finite_hits)
    assert tally.served > STATES // 10 and tally.rows_hit > 0  # the states do serve data
