"""Backoff and circuit breaker state, on a controlled clock."""

import pytest

from solaris_lib.cache.errors import CacheConfigError
from solaris_lib.client import Backoff, CircuitBreaker
from solaris_lib.client._breaker import BreakerState


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_backoff_grows_geometrically_up_to_its_cap():
    backoff = Backoff(initial_ms=10, max_ms=100, multiplier=3)
    assert [backoff.delay_s(k) for k in range(4)] == [0.01, 0.03, 0.09, 0.1]
    assert backoff.delay_s(10_000) == 0.1


@pytest.mark.parametrize("options", [dict(initial_ms=0), dict(initial_ms=10, max_ms=5),
                                     dict(multiplier=0.5)])
def test_bad_backoff_is_a_config_error(options):
    with pytest.raises(CacheConfigError):
        Backoff(**options)


def test_breaker_opens_after_consecutive_failures_only():
    state = BreakerState(CircuitBreaker(failure_threshold=3), Clock())
    assert not state.record_failure() and not state.record_failure()
    state.record_success()  # resets the streak
    assert not state.record_failure() and not state.record_failure()
    assert state.record_failure() and state.open and state.opened_total == 1
    assert not state.record_failure()  # already open: not opened again


def test_probes_back_off_and_a_success_closes():
    clock = Clock()
    state = BreakerState(CircuitBreaker(1, Backoff(initial_ms=100, max_ms=1000)), clock)
    state.record_failure()
    assert not state.probe_due()
    clock.now += 0.1
    assert state.probe_due()
    state.probe_failed()  # next probe after 200 ms
    clock.now += 0.15
    assert not state.probe_due()
    clock.now += 0.05
    assert state.probe_due()
    state.record_success()
    assert not state.open and not state.probe_due()


def test_threshold_must_be_positive():
    with pytest.raises(CacheConfigError):
        CircuitBreaker(failure_threshold=0)
