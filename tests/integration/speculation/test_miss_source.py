"""The miss source end to end: SolarisClient samples misses into a real Redis stream, speculation
reads that stream and proposes the missed pairs of known users on live items."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from solaris_lib.client import SolarisClient
from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.speculation.config import MineConfig, SpeculateConfig
from solaris_lib.speculation.misses import misses_frame, read_misses
from solaris_lib.speculation.pipeline import mined_in_memory, speculate_frames
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.cache.test_client import V1, put_version, wait_for

from .builders import T0, row, write_logs

pytestmark = pytest.mark.integration

END = T0 + timedelta(hours=10)


def test_client_misses_become_miss_candidates(spark, redis_url, key_prefix, tmp_path):
    import redis

    rows = [row(f"r{n}", n, user, item) for n, (user, item) in enumerate(
        [(7, 1), (7, 5), (8, 6), (8, 9), (7, 9), (8, 1)])]
    logs = read_window_spark(spark, str(write_logs(tmp_path, rows)), Interval(T0, END))
    mined = mined_in_memory(spark, logs, END, MineConfig())
    client_r = redis.Redis.from_url(redis_url)
    put_version(client_r, key_prefix, V1, {7: {1: [1, 1]}}, dim=2)
    client_r.close()
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS,
                                miss_sample_rate=1.0, miss_stream_maxlen=100) as client:
        client.lookup(7, [1, 5, 6])  # misses 5 and 6
        client.lookup(99, [5])  # a user speculation has never seen
        client.lookup(8, [404])  # an item that is not live
        wait_for(lambda: client.stats().misses_written == 3)
    now = datetime.fromtimestamp(time.time(), tz=UTC)
    read = read_misses(redis_url, key_prefix, Interval(now - timedelta(hours=1), now))
    assert read == [(7, 5), (7, 6), (8, 404), (99, 5)]
    config = SpeculateConfig(budget_per_user=10, sources=("miss",), live_window=timedelta(days=1))
    got = speculate_frames(spark, mined, config, misses=misses_frame(spark, read)).pairs.collect()
    assert sorted((r.user_id, r.item_id, tuple(r.sources)) for r in got) == [
        (7, 5, ("miss",)), (7, 6, ("miss",))]


def test_a_reported_miss_earns_its_weight_under_the_learned_scorer(spark, tmp_path):
    """The labelled interval's candidates carry the misses reported during the interval before
    it. There they were followed by rows, so the learned scorer keeps this interval's misses
    over repeat pairs; without them the scorer never sees a miss in training and every miss
    loses to the user's repeats."""
    start, end = T0 + timedelta(hours=20), T0 + timedelta(hours=30)
    users, rows, n = range(1, 13), [], 0

    def add(hours, user, item):
        nonlocal n
        n += 1
        rows.append(row(f"r{n}", hours, user, item))

    for user in users:
        for k in range(4):  # items 0, 1 go on into the labelled interval, 2, 3 stop
            for hours in ([1, 6, 12, 18] if k < 2 else [2, 8]):
                add(hours, user, 100 * user + k)
        for hours in (22, 25, 28):
            add(hours, user, 100 * user)
            add(hours, user, 100 * user + 1)
            add(hours, user, 5000 + user)  # the pair missed before the labelled interval
    for user in users:  # every missed item is live: another user was scored on it
        add(19, 99, 5000 + user)
        add(29, 99, 7000 + user)
    logs = read_window_spark(spark, str(write_logs(tmp_path, rows)), Interval(T0, end))
    past = mined_in_memory(spark, logs.filter(logs.ts < start), start, MineConfig())
    labels = logs.filter(logs.ts >= start)
    mined = mined_in_memory(spark, logs, end, MineConfig())
    config = SpeculateConfig(budget_per_user=4, sources=("repeat", "miss"), scorer="learned",
                             live_window=timedelta(days=1))
    now = misses_frame(spark, [(user, 7000 + user) for user in users])
    before = misses_frame(spark, [(user, 5000 + user) for user in users])

    def kept(past_misses) -> set:
        result = speculate_frames(spark, mined, config, train_on=(past, labels), misses=now,
                                  past_misses=past_misses)
        got = {(r.user_id, r.item_id) for r in result.pairs.collect()}
        result.release()
        return {(user, item) for user, item in got if user in users and item >= 7000}

    try:
        assert kept(before) == {(user, 7000 + user) for user in users}
        assert kept(None) == set()
    finally:
        past.release()
        mined.release()


def test_a_second_read_reports_the_pairs_a_trim_took_since_the_first(redis_url, key_prefix):
    """The next run reads the previous interval's misses again for its training candidates:
    late writes only add to what the interval's own run read, a trim of the stream's head
    takes, and the second read says how many pairs at least went missing."""
    import redis

    from solaris_lib.cache.format import misses_key
    from solaris_lib.speculation.misses import against_earlier_read, read_stream

    interval = Interval(T0, T0 + timedelta(hours=1))
    stream, ms = misses_key(key_prefix), int(T0.timestamp() * 1000)
    r = redis.Redis.from_url(redis_url)
    try:
        for k in range(6):  # the interval's misses, written during it: ids follow the ts
            r.xadd(stream, {"user": str(k), "items": f"{10 + k},{20 + k}", "ts": str(ms + k)},
                   id=f"{ms + k}-0")
        first = read_stream(redis_url, key_prefix, interval)
        r.xadd(stream, {"user": "9", "items": "99", "ts": str(ms + 10)},
               id=f"{ms + 3_600_000 + 5}-0")  # a late write, within the read's hour
        again = against_earlier_read(read_stream(redis_url, key_prefix, interval),
                                     first.as_dict())
        assert (first.as_dict()["pairs"], again["pairs"]) == (12, 13)
        assert (again["pairs_then"], again["lost_pairs"]) == (12, 0)
        # the head goes (entries 0-3); entries 4, 5 and the late one stay
        r.xtrim(stream, maxlen=3, approximate=False)
        trimmed = against_earlier_read(read_stream(redis_url, key_prefix, interval),
                                       first.as_dict())
        assert (trimmed["pairs"], trimmed["pairs_then"], trimmed["lost_pairs"]) == (5, 12, 7)
        no_earlier = against_earlier_read(read_stream(redis_url, key_prefix, interval), None)
        assert (no_earlier["pairs_then"], no_earlier["lost_pairs"]) == (None, None)
    finally:
        r.close()
