"""The request-log contract (docs/design.md): one row per (request, candidate item) the ranker scored.

=========== ======================== ==============================================
column      type                     meaning
=========== ======================== ==============================================
request_id  string                   one ranking request
ts          timestamp[us, UTC]       when the request was scored
user_id     int64 (>= 0)             the user
item_id     int64 (>= 0)             the candidate item
position    int32, nullable          rank shown to the user; null if not shown
clicked     bool, nullable           click on the shown item; null when unknown
=========== ======================== ==============================================

Files live under ``dt=YYYY-MM-DD/hour=HH/``. ``position`` and ``clicked`` may be absent (logs
with no impressions or no clicks): readers fill them with nulls. ``p_click`` (float32) is
written only by the simulator: the true click probability, readable by evaluation alone.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pyarrow as pa

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

REQUEST_LOG_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("ts", TIMESTAMP_TYPE, nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("position", pa.int32(), nullable=True),
        pa.field("clicked", pa.bool_(), nullable=True),
    ]
)
REQUIRED_COLUMNS = ("request_id", "ts", "user_id", "item_id")
OPTIONAL_COLUMNS = ("position", "clicked")
EVAL_ONLY_COLUMNS = {"p_click": pa.float32()}
WITH_EVAL_SCHEMA = REQUEST_LOG_SCHEMA.append(pa.field("p_click", pa.float32(), nullable=True))

_PARTITION = re.compile(r"dt=(\d{4}-\d{2}-\d{2})/hour=(\d{1,2})(?:/|$)")


def hour_partition(hour: datetime) -> str:
    """Relative partition folder of the hour containing ``hour``: ``dt=2026-01-05/hour=07``."""
    hour = hour.astimezone(UTC)
    return f"dt={hour:%Y-%m-%d}/hour={hour:%H}"


def parse_hour_partition(path: str) -> datetime | None:
    """Hour start encoded in a path's ``dt=.../hour=...`` segments, or None when it has none."""
    match = _PARTITION.search(path.replace("\\", "/"))
    if not match:
        return None
    day = datetime.strptime(match.group(1), "%Y-%m-%d").replace(tzinfo=UTC)
    return day.replace(hour=int(match.group(2)))


def spark_schema(with_eval: bool = False):
    """The contract as a Spark ``StructType`` (pyspark imported lazily)."""
    from pyspark.sql import types as T

    fields = [
        T.StructField("request_id", T.StringType(), False),
        T.StructField("ts", T.TimestampType(), False),
        T.StructField("user_id", T.LongType(), False),
        T.StructField("item_id", T.LongType(), False),
        T.StructField("position", T.IntegerType(), True),
        T.StructField("clicked", T.BooleanType(), True),
    ]
    if with_eval:
        fields.append(T.StructField("p_click", T.FloatType(), True))
    return T.StructType(fields)


def timestamps_us(column):
    """(n,) int64 microseconds since the epoch of a timestamp column (any unit, UTC)."""
    import pyarrow.compute as pc

    return pc.cast(column, pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(
        zero_copy_only=False)
