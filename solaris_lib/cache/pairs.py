"""numpy work on a batch of (user, item, embedding) pairs: no I/O, no Spark.

Used by the executor-side writer: view the embedding bytes, drop non-finite values, resolve
duplicate pairs deterministically, pick the read-back sample, and encode ``HSET`` commands.

A (user, item cluster) row of the hierarchical fallback travels through the writer as an item
id ``-1 - cluster_id`` (:func:`cluster_rows_item`): negative ids never occur among items (the
publisher quarantines them), sort before the user's items, and are written as the field
``c<cluster_id>``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from solaris_lib.cache.memory import decimal_digits

_FP16_EXPONENT = 0x7C00
_MIX_ITEM = np.uint64(0x9E3779B97F4A7C15)
_MIX_USER = np.uint64(0xC2B2AE3D27D4EB4F)


def fixed_width_values(array: pa.Array, width: int) -> np.ndarray:
    """The bytes of a binary array whose values are all ``width`` long, as (n, width) uint8.

    A zero-copy view of the array's data buffer (the publisher validated every length).
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if len(array) == 0:
        return np.zeros((0, width), dtype=np.uint8)
    offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=offset_type)
    first, last = offsets[array.offset], offsets[array.offset + len(array)]
    data = np.frombuffer(array.buffers()[2], dtype=np.uint8)[first:last]
    return data.reshape(len(array), width)


def binary_column(values: np.ndarray) -> pa.Array:
    """A binary array with one value per row of ``values`` (n, w) uint8 (or any 2-D array
    whose rows are the bytes): the inverse of :func:`fixed_width_values`."""
    rows = np.ascontiguousarray(values)
    width = rows.shape[1] * rows.itemsize
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(rows),
                                                 [None, pa.py_buffer(rows.tobytes())])
    return fixed.cast(pa.binary())


def non_finite_fp16(values: np.ndarray) -> np.ndarray:
    """(n,) True where a row of fp16 bytes (n, 2 * dim) holds an inf or a nan (every exponent
    bit of a value set)."""
    halves = np.ascontiguousarray(values).view("<u2")
    bad = (halves & _FP16_EXPONENT) == _FP16_EXPONENT
    if not bad.any():  # one pass over the flat array: the common case
        return np.zeros(len(halves), dtype=bool)
    return bad.any(axis=1)


def sort_runs(users: np.ndarray, items: np.ndarray, values: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows sorted by (user, item), stable (copies of a pair keep their order); unchanged
    (no copy) when they already are. ``users``, ``items`` (n,), ``values`` (n, w)."""
    same_user = users[1:] == users[:-1]
    if (np.all(users[1:] >= users[:-1])
            and np.all(items[1:][same_user] >= items[:-1][same_user])):
        return users, items, values
    order = _user_item_order(users, items, same_user)
    return users[order], items[order], values[order]


def _user_item_order(users: np.ndarray, items: np.ndarray, same_user: np.ndarray
                     ) -> np.ndarray:
    """Stable order by (user, item): one argsort of ``rank * span + item`` (``rank``: the
    user's rank among the batch's users, from its runs' first rows when each user is one
    run; ``span``: the items' range) when that fits an int64, else a lexsort."""
    runs = np.r_[0, np.cumsum(~same_user)]
    heads = users[np.r_[True, ~same_user]]
    if len(np.unique(heads)) == len(heads):
        head_rank = np.empty(len(heads), np.int64)
        head_rank[np.argsort(heads, kind="stable")] = np.arange(len(heads))
        rank = head_rank[runs]
    else:
        rank = np.unique(users, return_inverse=True)[1].reshape(-1)
    low, high = int(items.min()), int(items.max())
    span = high - low + 1
    if (int(rank.max()) + 1) * span >= 2**63:
        return np.lexsort((items, users))
    return np.argsort(rank.astype(np.int64) * span + (items - low), kind="stable")


def dedupe(users: np.ndarray, items: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(n,) mask keeping one row per (user, item); rows arrive sorted by (user, item).

    Of the copies of a pair the one with the smallest embedding bytes (unsigned,
    lexicographic) is kept, so the result does not depend on the order of the copies.
    """
    keep = np.ones(len(users), dtype=bool)
    same = (users[1:] == users[:-1]) & (items[1:] == items[:-1])
    if not same.any():
        return keep
    starts = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[starts[1:], len(users)]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if end - start > 1:
            copies = [values[i].tobytes() for i in range(start, end)]
            keep[start:end] = False
            keep[start + copies.index(min(copies))] = True
    return keep


def sampled(user: int | np.ndarray, items: np.ndarray, modulus: int,
            cluster_modulus: int | None = None) -> np.ndarray:
    """(k,) True for the pairs of the read-back sample: about one pair in ``modulus`` (one
    cluster row in ``cluster_modulus``, default ``modulus``), chosen by a fixed hash of
    (user, item) so every rerun checks the same pairs. ``user``: one id, or (k,) ids."""
    users = np.asarray(user, dtype=np.int64).astype(np.uint64).reshape(-1)
    mixed = items.astype(np.uint64) * _MIX_ITEM + users * _MIX_USER
    mod = np.where(items < 0, np.uint64(cluster_modulus or modulus), np.uint64(modulus))
    return (mixed >> np.uint64(29)) % mod == 0


def cluster_rows_item(cluster_ids: np.ndarray) -> np.ndarray:
    """The writer's item id of a (user, cluster) row: ``-1 - cluster_id`` (its own inverse)."""
    return -1 - np.asarray(cluster_ids, dtype=np.int64)


def field_names(items: np.ndarray) -> list[str]:
    """The hash field of each writer item id: decimal item id, or ``c<cluster>`` when < 0."""
    return [str(i) if i >= 0 else f"c{-1 - i}" for i in np.asarray(items).tolist()]


def _hset_head(key: bytes, pairs: int) -> bytes:
    return b"*%d\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n" % (2 + 2 * pairs, len(key), key)


def hset_pieces(keys: list[bytes], starts: np.ndarray, items: np.ndarray,
                values: np.ndarray) -> list[list[bytes | memoryview]]:
    """One ``HSET`` per run of rows, as the pieces that joined make it (no copy of the
    values until the pipeline joins its payload): run ``k`` (rows ``starts[k]`` up to the
    next start) into ``keys[k]``; ``items`` (n,) int64 sorted within each run (so its
    fields of one kind and digit count are consecutive rows), ``values`` (n, w) uint8.

    The pair records of each (kind, digit count) are built once for the whole batch; a run
    is its head plus views of them (one per kind and digit count it holds).
    """
    if not len(items):
        return []
    cluster = items < 0
    numbers = np.where(cluster, -1 - items, items)
    group = decimal_digits(numbers) + 32 * cluster
    blobs: dict[int, tuple[memoryview, int]] = {}
    rank = np.empty(len(items), np.int64)
    for key in np.unique(group).tolist():
        rows = np.flatnonzero(group == key)
        rank[rows] = np.arange(len(rows))
        every = len(rows) == len(items)  # one kind and digit count: no gather
        records = _pair_records(numbers if every else numbers[rows],
                                values if every else values[rows], key % 32,
                                b"c" if key >= 32 else b"")
        blobs[key] = (memoryview(records.reshape(-1)), records.shape[1])
    ends = np.r_[starts[1:], len(items)]
    cuts = np.union1d(np.flatnonzero(np.r_[True, group[1:] != group[:-1]]), starts)
    first_cut = np.searchsorted(cuts, starts).tolist()
    bounds = np.r_[cuts, len(items)].tolist()
    kinds, ranks = group[cuts].tolist(), rank[cuts].tolist()
    commands = []
    for k, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        pieces: list[bytes | memoryview] = [_hset_head(keys[k], end - start)]
        at = first_cut[k]
        while at < len(kinds) and bounds[at] < end:
            blob, width = blobs[kinds[at]]
            first = ranks[at] * width
            pieces.append(blob[first:first + (bounds[at + 1] - bounds[at]) * width])
            at += 1
        commands.append(pieces)
    return commands


def _pair_records(items: np.ndarray, values: np.ndarray, length: int,
                  lead: bytes = b"") -> np.ndarray:
    """(k, record) uint8 RESP of k pairs: ``$<len> CRLF lead digits CRLF $<w> CRLF value CRLF``.

    Every row starts as a template copy; then the digits (one column per decimal place,
    lowest first) and the values are written in."""
    head = b"$%d\r\n%s" % (length + len(lead), lead)
    middle = b"\r\n$%d\r\n" % values.shape[1]
    template = head + b"0" * length + middle + bytes(values.shape[1]) + b"\r\n"
    records = np.empty((len(items), len(template)), dtype=np.uint8)
    records[:] = np.frombuffer(template, dtype=np.uint8)
    rest = np.array(items, dtype=np.int64)
    for column in range(len(head) + length - 1, len(head) - 1, -1):
        quotient = rest // 10
        records[:, column] = rest - quotient * 10 + ord("0")
        rest = quotient
    start = len(head) + length + len(middle)
    records[:, start:start + values.shape[1]] = values
    return records
