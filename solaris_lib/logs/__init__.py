"""The request-log contract: schema, partition layout, validation and window readers."""

from solaris_lib.logs.schema import (
    EVAL_ONLY_COLUMNS,
    OPTIONAL_COLUMNS,
    REQUEST_LOG_SCHEMA,
    REQUIRED_COLUMNS,
    hour_partition,
    parse_hour_partition,
)

__all__ = [
    "EVAL_ONLY_COLUMNS",
    "OPTIONAL_COLUMNS",
    "REQUEST_LOG_SCHEMA",
    "REQUIRED_COLUMNS",
    "hour_partition",
    "parse_hour_partition",
]
