"""numpy work on a batch of (user, field id, embedding) rows: no I/O, no Spark.

Used by the executor-side writer: view the embedding bytes, drop non-finite values, sort the
rows by key, resolve duplicate pairs deterministically, pick the read-back sample, and encode
the ``HSET`` commands. A field id is an item id (a user's exact hashes) or a cluster id (the
user's cluster hash); both are non-negative and written in decimal.

The HSETs are packed here rather than by redis-py's packer because a publish packs millions
of fields: the RESP of each (digit count) group of fields is built once for a whole batch,
about three times faster than one ``hiredis.pack_command`` per user hash (measured on 10^6
fields of 128 bytes). The bytes are the same (``tests/unit/cache/test_pairs.py``).
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


def key_order(users: np.ndarray, parts: np.ndarray, items: np.ndarray) -> np.ndarray | None:
    """The stable order of the rows by (user, key part, field id), or None when they are in
    it already. ``users``, ``parts`` (a row's bucket, < 64; 0 for one key per user) and
    ``items`` (n,) int64.

    Rows that come sorted by (user, item) (the infer job writes them so) only need each
    user's rows grouped by part: one stable radix-friendly argsort of ``user rank * 64 +
    part``; other rows a lexsort.
    """
    same_user = users[1:] == users[:-1]
    if not (np.all(users[1:] >= users[:-1])
            and np.all(items[1:][same_user] >= items[:-1][same_user])):
        return np.lexsort((items, parts, users))
    if not parts.any():
        return None
    grouped = np.r_[0, np.cumsum(~same_user)] * 64 + parts
    small = np.int16 if grouped[-1] < 2**15 else np.int64
    return np.argsort(grouped.astype(small), kind="stable")


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


def sampled(user: int | np.ndarray, items: np.ndarray, modulus: int) -> np.ndarray:
    """(k,) True for the pairs of the read-back sample: about one pair in ``modulus``, chosen
    by a fixed hash of (user, field id) so every rerun checks the same pairs. ``user``: one
    id, or (k,) ids."""
    users = np.asarray(user, dtype=np.int64).astype(np.uint64).reshape(-1)
    with np.errstate(over="ignore"):
        mixed = items.astype(np.uint64) * _MIX_ITEM + users * _MIX_USER
    return (mixed >> np.uint64(29)) % np.uint64(modulus) == 0


def _hset_head(key: bytes, pairs: int) -> bytes:
    return b"*%d\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n" % (2 + 2 * pairs, len(key), key)


def hset_pieces(keys: list[bytes], starts: np.ndarray, items: np.ndarray,
                values: np.ndarray) -> list[list[bytes | memoryview]]:
    """One ``HSET`` per run of rows, as the pieces that joined make it (no copy of the
    values until the pipeline joins its payload): run ``k`` (rows ``starts[k]`` up to the
    next start) into ``keys[k]``; ``items`` (n,) non-negative int64 sorted within each run
    (so its fields of one digit count are consecutive rows), ``values`` (n, w) uint8.

    The pair records of each digit count are built once for the whole batch; a run is its
    head plus views of them (one per digit count it holds).
    """
    if not len(items):
        return []
    group = decimal_digits(items)
    blobs: dict[int, tuple[memoryview, int]] = {}
    rank = np.empty(len(items), np.int64)
    for key in np.unique(group).tolist():
        rows = np.flatnonzero(group == key)
        rank[rows] = np.arange(len(rows))
        every = len(rows) == len(items)  # one kind and digit count: no gather
        records = _pair_records(items if every else items[rows],
                                values if every else values[rows], key)
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


def _pair_records(items: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
    """(k, record) uint8 RESP of k pairs: ``$<len> CRLF digits CRLF $<w> CRLF value CRLF``.

    Every row starts as a template copy; then the digits (one column per decimal place,
    lowest first) and the values are written in."""
    head = b"$%d\r\n" % length
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
