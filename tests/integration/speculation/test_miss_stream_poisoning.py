"""A poisoned misses stream never fails speculation (real Redis, real Spark): undecodable,
oversized and mistyped entries are skipped and counted, the valid ones read; a key that is not
a stream skips the source; a user who may not read the stream fails loudly."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import redis

from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.speculation.config import MineConfig, SpeculateConfig
from solaris_lib.speculation.misses import (
    MAX_ITEMS,
    MissesAccessError,
    misses_frame,
    read_stream,
)
from solaris_lib.speculation.pipeline import mined_in_memory, speculate_frames
from tests.integration.cache.conftest import private_redis  # noqa: F401

from .builders import T0, row, write_logs

pytestmark = pytest.mark.integration
END = T0 + timedelta(hours=10)


def now_interval() -> Interval:
    now = datetime.fromtimestamp(time.time(), tz=UTC)
    return Interval(now - timedelta(hours=1), now + timedelta(minutes=1))


def test_poisoned_entries_are_skipped_and_counted_and_speculation_runs(spark, redis_url,
                                                                      key_prefix, tmp_path):
    r = redis.Redis.from_url(redis_url)
    stream = f"{key_prefix}:misses"
    ts = str(int(time.time() * 1000) - 1000)
    poison = [
        ({"user": "7", "items": "5,6", "ts": ts}, None),  # valid
        ({"user": b"\xff\xfe", "items": "5", "ts": ts}, "undecodable"),
        ({b"\xc3(": "1", "user": "7", "items": "5", "ts": ts}, "undecodable"),
        ({"user": "7", "items": ",".join(["1"] * (MAX_ITEMS + 1)), "ts": ts}, "oversized"),
        ({"user": "7", "items": "5", "ts": ts, "pad": "x" * 100_000}, "oversized"),
        ({"user": "seven", "items": "5", "ts": ts}, "mistyped"),
        ({"user": "-7", "items": "5", "ts": ts}, "mistyped"),
        ({"user": "7", "items": "5,1e3", "ts": ts}, "mistyped"),
        ({"user": "99999999999999999999", "items": "5", "ts": ts}, "mistyped"),
        ({"items": "5", "ts": ts}, "mistyped"),
        ({"user": "8", "items": "9", "ts": ts}, None),  # valid
    ]
    for fields, _ in poison:
        r.xadd(stream, fields)
    found = read_stream(redis_url, key_prefix, now_interval())
    expected: dict[str, int] = {}
    for _, reason in poison:
        if reason:
            expected[reason] = expected.get(reason, 0) + 1
    assert found.entries == len(poison) and found.skipped == expected
    assert found.rows == [(7, 5), (7, 6), (8, 9)]

    rows = [row(f"r{n}", n, user, item) for n, (user, item) in enumerate(
        [(7, 1), (7, 5), (8, 6), (8, 9), (7, 6)])]
    logs = read_window_spark(spark, str(write_logs(tmp_path, rows)), Interval(T0, END))
    mined = mined_in_memory(spark, logs, END, MineConfig())
    config = SpeculateConfig(budget_per_user=10, sources=("miss",), live_window=timedelta(days=1))
    got = speculate_frames(spark, mined, config, misses=misses_frame(spark, found.rows))
    assert sorted((p.user_id, p.item_id) for p in got.pairs.collect()) == [(7, 5), (7, 6), (8, 9)]


def test_a_key_that_is_not_a_stream_skips_the_source(redis_url, key_prefix):
    redis.Redis.from_url(redis_url).set(f"{key_prefix}:misses", b"not a stream")
    assert read_stream(redis_url, key_prefix, now_interval()) is None


def test_a_user_without_xrange_fails_loudly(private_redis):  # noqa: F811
    server = private_redis("--user", "spec", "on", ">spec-pw", "resetkeys", "~p:*", "-@all",
                           "+ping", "+get")
    redis.Redis.from_url(server.url).xadd("p:misses", {"user": "1", "items": "2", "ts": "3"})
    url = server.url.replace("redis://", "redis://spec:spec-pw@")
    with pytest.raises(MissesAccessError, match="may not read p:misses.*\\+xrange") as caught:
        read_stream(url, "p", now_interval())
    assert caught.value.exit_code == 2 and "spec-pw" not in str(caught.value)
    with pytest.raises(MissesAccessError):
        read_stream(url.replace("spec-pw", "wrong"), "p", now_interval())


def test_a_flood_of_distinct_misses_stops_at_the_pair_cap(redis_url, key_prefix, monkeypatch):
    """Every pair read goes through the driver: the read stops (counted as truncated) once it
    holds MAX_PAIRS distinct pairs, even inside one XRANGE batch."""
    from solaris_lib.speculation import misses

    monkeypatch.setattr(misses, "MAX_PAIRS", 3)
    r = redis.Redis.from_url(redis_url)
    ts = str(int(time.time() * 1000) - 1000)
    for user in range(5):
        r.xadd(f"{key_prefix}:misses", {"user": str(user), "items": "1,2", "ts": ts})
    found = read_stream(redis_url, key_prefix, now_interval())
    assert found.truncated and (found.entries, len(found.rows)) == (2, 4)
