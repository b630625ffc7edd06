"""Counters and latency percentiles."""

import numpy as np

from solaris_lib.client import ClientStats
from solaris_lib.client._stats import Counters, LatencyHistogram


def test_percentiles_are_within_four_percent_of_numpy():
    rng = np.random.default_rng(1)
    samples = rng.lognormal(mean=5.5, sigma=0.6, size=20_000)  # microseconds
    histogram = LatencyHistogram()
    for value in samples:
        histogram.add(float(value))
    for q in (0.5, 0.9, 0.99):
        exact = np.percentile(samples, q * 100, method="inverted_cdf")
        assert exact <= histogram.percentile(q) <= exact * 1.04
    assert histogram.max_us == samples.max()


def test_empty_histogram():
    assert LatencyHistogram().percentile(0.5) == 0.0


def test_counters_snapshot_and_reset():
    counters = Counters()
    counters.record_lookup(10, 7, 100.0)
    counters.record_lookup(5, 0, 300.0, errors=1, timeouts=1)
    counters.add(misses_sampled=2)
    stats = counters.snapshot(reset=True)
    assert isinstance(stats, ClientStats)
    assert (stats.lookups, stats.pairs, stats.hits, stats.misses) == (2, 15, 7, 8)
    assert (stats.errors, stats.timeouts, stats.misses_sampled) == (1, 1, 2)
    assert stats.hit_rate == 7 / 15 and stats.latency_mean_us == 200.0
    assert stats.latency_max_us == 300.0
    assert counters.snapshot() == ClientStats()
    assert stats.as_dict()["hits"] == 7
