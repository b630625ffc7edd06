"""Row-level checks: which rows of a file break the contract, and why.

Each row gets at most one reason, the first that applies in :data:`REASONS` order. Rows with a
reason are quarantined by the caller, never dropped silently.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris_lib.logs.conform import INT64_MAX

REASONS = (
    "null_request_id",
    "null_ts",
    "null_user_id",
    "null_item_id",
    "negative_user_id",
    "negative_item_id",
    "id_out_of_range",
    "ts_outside_partition",
    "bad_position",
    "bad_clicked",
    "duplicate_row",
)
INT32_MAX = 2**31 - 1


def _mask(array) -> np.ndarray:
    """Boolean numpy mask from an arrow boolean array, nulls as False."""
    return pc.fill_null(array, False).to_numpy(zero_copy_only=False).astype(bool)


def _has(raw: pa.Table, name: str) -> bool:
    return name in raw.column_names


def _id_masks(raw: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(negative, too large for int64) masks of an integer id column."""
    col = raw.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_unsigned_integer(col.type):
        return np.zeros(len(col), bool), _mask(pc.greater(col.cast(pa.uint64()), pa.scalar(INT64_MAX, pa.uint64())))
    return _mask(pc.less(col, 0)), np.zeros(len(col), bool)


def _outside_partition(conformed: pa.Table, hour: datetime | None) -> np.ndarray:
    if hour is None:
        return np.zeros(conformed.num_rows, bool)
    ts = conformed.column("ts")
    inside = pc.and_(
        pc.greater_equal(ts, pa.scalar(hour, ts.type)),
        pc.less(ts, pa.scalar(hour + timedelta(hours=1), ts.type)),
    )
    return ~_mask(inside) & ~_mask(pc.is_null(ts))


def _bad_position(raw: pa.Table) -> np.ndarray:
    if not _has(raw, "position"):
        return np.zeros(raw.num_rows, bool)
    col = raw.column("position")
    if pa.types.is_unsigned_integer(col.type):
        return _mask(pc.greater(col.cast(pa.uint64()), pa.scalar(INT32_MAX, pa.uint64())))
    col = col.cast(pa.int64())
    return _mask(pc.or_(pc.less(col, 0), pc.greater(col, INT32_MAX)))


def _bad_clicked(raw: pa.Table) -> np.ndarray:
    if not _has(raw, "clicked") or pa.types.is_boolean(raw.column("clicked").type):
        return np.zeros(raw.num_rows, bool)
    col = raw.column("clicked").cast(pa.int64())
    return _mask(pc.invert(pc.is_in(col, pa.array([0, 1])))) & ~_mask(pc.is_null(col))


def _duplicates(conformed: pa.Table, earlier: np.ndarray) -> np.ndarray:
    """Rows repeating an earlier valid row's (request_id, item_id)."""
    codes = pc.dictionary_encode(conformed.column("request_id")).combine_chunks().indices
    request = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    item = pc.fill_null(conformed.column("item_id"), 0).to_numpy().astype(np.int64)
    keys = np.stack([request, item], axis=1)
    candidates = np.flatnonzero(~earlier)
    _, first = np.unique(keys[candidates], axis=0, return_index=True)
    dup = np.ones(conformed.num_rows, bool)
    dup[candidates[first]] = False
    return dup & ~earlier


def row_reasons(raw: pa.Table, conformed: pa.Table, hour: datetime | None) -> np.ndarray:
    """Per-row reason index into :data:`REASONS`, or -1 for a valid row.  Shape ``(rows,)``.

    ``raw`` is the file as read (for range checks before casting), ``conformed`` the same rows
    cast to the contract, ``hour`` the partition hour the file lives in (None: not checked).
    """
    neg_user, big_user = _id_masks(raw, "user_id")
    neg_item, big_item = _id_masks(raw, "item_id")
    checks = [
        _mask(pc.is_null(conformed.column("request_id"))),
        _mask(pc.is_null(conformed.column("ts"))),
        _mask(pc.is_null(conformed.column("user_id"))),
        _mask(pc.is_null(conformed.column("item_id"))),
        neg_user,
        neg_item,
        big_user | big_item,
        _outside_partition(conformed, hour),
        _bad_position(raw),
        _bad_clicked(raw),
    ]
    reason = np.full(conformed.num_rows, -1, dtype=np.int16)
    for index, mask in enumerate(checks):
        reason[(reason < 0) & mask] = index
    if conformed.num_rows:
        dup = _duplicates(conformed, reason >= 0)
        reason[dup] = REASONS.index("duplicate_row")
    return reason
