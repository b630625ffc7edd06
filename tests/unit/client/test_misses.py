"""Miss sampling: the queue and the stream entries of docs/pipeline.md."""

import numpy as np

from solaris_lib.client._misses import MissEntry, MissSampler, xadd_commands
from solaris_lib.client._stats import Counters


def test_stream_entries_have_the_pipeline_format():
    entry = MissEntry(7, np.array([3, 11]), 1767607200123)
    assert xadd_commands("p:misses", [entry], 1000) == [(
        "XADD", "p:misses", "MAXLEN", "~", 1000, "*", "user", 7, "items", "3,11",
        "ts", 1767607200123)]


def test_sampler_queues_only_the_missed_items():
    counters = Counters()
    sampler = MissSampler(1.0, 10, counters)
    sampler.offer(5, np.array([1, 2, 3]), np.array([True, False, False]))
    (entry,) = sampler.wait(0.0)
    assert entry.user_id == 5 and entry.item_ids.tolist() == [2, 3] and entry.ts_ms > 0
    assert counters.snapshot().misses_sampled == 1


def test_rate_zero_records_nothing_and_a_full_queue_drops_and_counts():
    counters = Counters()
    MissSampler(0.0, 10, counters).offer(5, np.array([1]), np.array([False]))
    assert counters.snapshot().misses_sampled == 0
    full = MissSampler(1.0, 2, counters)
    for _ in range(5):
        full.offer(5, np.array([1]), np.array([False]))
    stats = counters.snapshot()
    assert (stats.misses_sampled, stats.misses_dropped) == (2, 3)
    assert len(full.wait(0.0)) == 2


def test_wake_sentinel_carries_no_entry():
    sampler = MissSampler(1.0, 10, Counters())
    sampler.wake()
    assert sampler.wait(1.0) == []
