from datetime import UTC, datetime, timedelta

import pytest

from solaris_lib.errors import ConfigError
from solaris_lib.intervals import Interval, key_to_start, parse_duration, parse_timestamp


def test_parse_timestamp_accepts_zones_and_assumes_utc_for_naive():
    assert parse_timestamp("2026-01-05T10:00:00Z") == datetime(2026, 1, 5, 10, tzinfo=UTC)
    assert parse_timestamp("2026-01-05T12:00:00+02:00") == datetime(2026, 1, 5, 10, tzinfo=UTC)
    assert parse_timestamp("2026-01-05") == datetime(2026, 1, 5, tzinfo=UTC)


def test_parse_timestamp_rejects_garbage():
    with pytest.raises(ConfigError, match="ISO-8601"):
        parse_timestamp("yesterday")


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("1h", 3600), ("7d", 604800), ("2w", 1209600)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_parse_duration_rejects_units_it_does_not_know():
    with pytest.raises(ConfigError, match="duration"):
        parse_duration("3 months")


def test_interval_key_round_trip_and_neighbours():
    interval = Interval.parse("2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z")
    assert interval.key == "20260105T100000Z"
    assert key_to_start(interval.key) == interval.start
    assert interval.previous() == Interval.parse("2026-01-05T09:00", "2026-01-05T10:00")
    assert interval.following().start == interval.end


def test_interval_hours_cover_partial_hours():
    interval = Interval.parse("2026-01-05T10:30", "2026-01-05T12:10")
    assert [h.hour for h in interval.hours()] == [10, 11, 12]


def test_interval_rejects_naive_and_empty_windows():
    with pytest.raises(ConfigError, match="timezone-aware"):
        Interval(datetime(2026, 1, 5), datetime(2026, 1, 6))
    with pytest.raises(ConfigError, match="not after"):
        Interval.parse("2026-01-05T10:00", "2026-01-05T10:00")


def test_an_interval_record_reads_back_and_a_bad_one_is_a_config_error():
    hour = Interval.parse("2026-01-05T10:00:00+00:00", "2026-01-05T11:00:00+00:00")
    assert hour.record() == {"start": "2026-01-05T10:00:00+00:00",
                             "end": "2026-01-05T11:00:00+00:00"}
    assert Interval.from_record(hour.record()) == hour
    for bad in ({"start": "2026-01-05T10:00:00+00:00"}, [1], {"start": None, "end": 3},
                {"start": "x", "end": "y"}):
        with pytest.raises(ConfigError):
            Interval.from_record(bad)
