from datetime import UTC, datetime

from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition, parse_hour_partition


def test_partition_layout_round_trip():
    hour = datetime(2026, 1, 5, 7, 42, tzinfo=UTC)
    assert hour_partition(hour) == "dt=2026-01-05/hour=07"
    assert parse_hour_partition("/data/logs/dt=2026-01-05/hour=07/part-0.parquet") == hour.replace(
        minute=0
    )
    assert parse_hour_partition("/data/logs/part-0.parquet") is None


def test_contract_columns_and_types():
    assert REQUEST_LOG_SCHEMA.names == [
        "request_id", "ts", "user_id", "item_id", "position", "clicked"
    ]
    assert str(REQUEST_LOG_SCHEMA.field("ts").type) == "timestamp[us, tz=UTC]"
    assert REQUEST_LOG_SCHEMA.field("position").nullable
    assert not REQUEST_LOG_SCHEMA.field("user_id").nullable
