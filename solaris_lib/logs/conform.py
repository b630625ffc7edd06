"""Column-level checks: does a file's schema meet the contract, and cast it to the contract types.

A missing required column or a column whose type cannot represent the contract's is an error for
the whole file (:class:`LogContractError`, exit code 2). Safe widenings are accepted (int32 ids,
timestamps in ns or without a zone, integer request ids, 0/1 integer clicks); values that do not
survive the cast are left for the row checks to quarantine.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from solaris_lib.errors import LogContractError
from solaris_lib.logs.schema import (
    EVAL_ONLY_COLUMNS,
    OPTIONAL_COLUMNS,
    REQUEST_LOG_SCHEMA,
    REQUIRED_COLUMNS,
    TIMESTAMP_TYPE,
    WITH_EVAL_SCHEMA,
)

INT64_MAX = 2**63 - 1


def _plain(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


def _accepts(column: str, type_: pa.DataType) -> bool:
    t = _plain(type_)
    if column == "request_id":
        return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
    if column == "ts":
        return pa.types.is_timestamp(t)
    if column in ("user_id", "item_id", "position"):
        return pa.types.is_integer(t)
    if column == "clicked":
        return pa.types.is_boolean(t) or pa.types.is_integer(t)
    if column in EVAL_ONLY_COLUMNS:
        return pa.types.is_floating(t)
    return True


def check_columns(schema: pa.Schema, path: str) -> list[str]:
    """Raise on a missing or mistyped contract column; return notes about tolerated differences."""
    names = set(schema.names)
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise LogContractError(
            path,
            f"required column(s) missing: {', '.join(missing)} "
            f"(found: {', '.join(schema.names) or 'none'})",
        )
    known = set(REQUEST_LOG_SCHEMA.names) | set(EVAL_ONLY_COLUMNS)
    for field in schema:
        if field.name in known and not _accepts(field.name, field.type):
            expected = (
                REQUEST_LOG_SCHEMA.field(field.name).type
                if field.name in REQUEST_LOG_SCHEMA.names
                else EVAL_ONLY_COLUMNS[field.name]
            )
            raise LogContractError(
                path, f"column {field.name!r} has type {field.type}, expected {expected}"
            )
    notes = [f"column {c!r} absent: read as null" for c in OPTIONAL_COLUMNS if c not in names]
    extra = sorted(names - known)
    if extra:
        notes.append(f"extra column(s) ignored: {', '.join(extra)}")
    return notes


def _cast_ts(col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = _plain(col.type)
    if t.tz is None:
        col = pc.assume_timezone(col.cast(pa.timestamp(t.unit)), "UTC")
    return col.cast(TIMESTAMP_TYPE, safe=False)


def _cast_column(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if name == "ts":
        return _cast_ts(col)
    if name == "clicked" and pa.types.is_integer(col.type):
        return pc.equal(col, 1)
    return col.cast(WITH_EVAL_SCHEMA.field(name).type, safe=False)


def conform(table: pa.Table, with_eval: bool = False) -> pa.Table:
    """Cast ``table`` (already checked) to the contract schema, filling absent optional columns.

    Out-of-range values are wrapped by the unsafe cast; :func:`row_problems` flags them from the
    raw table, so those rows never reach a reader.
    """
    schema = WITH_EVAL_SCHEMA if with_eval else REQUEST_LOG_SCHEMA
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(_cast_column(field.name, table.column(field.name)))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
