"""The row hash of the content digest, vectorised over rows in numpy.

The version id names its content by a digest of a hash of every publishable row
(``docs/cache-format.md``): XXH64 with seed 42, each column hashed with the previous column's
hash as its seed (a long as 8 little-endian bytes, a binary value as its bytes), which is
Spark's ``xxhash64(user_id, item_id, embedding)``: ``tests`` pin it against ``F.xxhash64`` on
random rows and edge values, so anyone can recompute a digest with Spark. All arithmetic is on
uint64 arrays (wrapping, as Java's ``long``).
"""

from __future__ import annotations

import numpy as np

SEED = 42  # Spark's XxHash64 default seed
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    """``x`` rotated left by ``r`` bits, in place."""
    high = x >> np.uint64(64 - r)
    x <<= np.uint64(r)
    x |= high
    return x


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """XXH64's round, in place on ``acc``: ``rotl(acc + lane * P2, 31) * P1``."""
    acc += lane * _P2
    _rotl(acc, 31)
    acc *= _P1
    return acc


def _merge(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """XXH64's merge round: ``(acc ^ round(0, lane)) * P1 + P4`` (a new array)."""
    acc = acc ^ _round(np.zeros_like(lane), lane)
    acc *= _P1
    acc += _P4
    return acc


def _fmix(h: np.ndarray) -> np.ndarray:
    """XXH64's avalanche, in place."""
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def hash_long(values: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """(n,) uint64 XXH64 of each int64 value (8 little-endian bytes) with ``seed`` (n,) or one."""
    lane = np.asarray(values, dtype=np.int64).view(np.uint64)
    h = np.asarray(seed, dtype=np.uint64) + (_P5 + np.uint64(8))
    h = np.broadcast_to(h, lane.shape).copy()
    h ^= _round(np.zeros_like(lane), lane)
    _rotl(h, 27)
    h *= _P1
    h += _P4
    return _fmix(h)


def hash_rows(rows: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """(n,) uint64 XXH64 of each row of ``rows`` (n, w) uint8 (w bytes, any w) with ``seed``."""
    n, width = rows.shape
    seed = np.broadcast_to(np.asarray(seed, dtype=np.uint64), (n,))
    whole = width // 8 * 8
    words = np.ascontiguousarray(rows[:, :whole]).view("<u8") if whole else None
    if width >= 32:
        h = _stripes(words, seed, width // 32)
    else:
        h = seed + _P5
    h += np.uint64(width)
    for k in range((width // 32) * 4, width // 8):
        h ^= _round(np.zeros_like(h), words[:, k])
        _rotl(h, 27)
        h *= _P1
        h += _P4
    at = whole
    if width - at >= 4:
        word = np.ascontiguousarray(rows[:, at:at + 4]).view("<u4")[:, 0].astype(np.uint64)
        h ^= word * _P1
        _rotl(h, 23)
        h *= _P2
        h += _P3
        at += 4
    for k in range(at, width):
        h ^= rows[:, k].astype(np.uint64) * _P5
        _rotl(h, 11)
        h *= _P1
    return _fmix(h)


def _stripes(words: np.ndarray, seed: np.ndarray, stripes: int) -> np.ndarray:
    """The four accumulators over ``stripes`` 32-byte stripes, merged (XXH64's long input)."""
    acc = [seed + (_P1 + _P2), seed + _P2, seed.copy(), seed - _P1]
    for stripe in range(stripes):
        for lane in range(4):
            _round(acc[lane], words[:, 4 * stripe + lane])
    h = _rotl(acc[0].copy(), 1) + _rotl(acc[1].copy(), 7)
    h += _rotl(acc[2].copy(), 12)
    h += _rotl(acc[3].copy(), 18)
    for lane in range(4):
        h = _merge(h, acc[lane])
    return h


def row_hash(users: np.ndarray, items: np.ndarray, embeddings: np.ndarray) -> np.ndarray:
    """(n,) int64: Spark's ``xxhash64(user_id, item_id, embedding)`` of rows without nulls;
    ``users``, ``items`` (n,) int64, ``embeddings`` (n, w) uint8 (one length per call)."""
    with np.errstate(over="ignore"):
        h = hash_long(users, SEED)
        h = hash_long(items, h)
        return hash_rows(embeddings, h).view(np.int64)


def digest_parts(hashes: np.ndarray) -> tuple[int, int]:
    """``(sum of the low 32 bits, xor)`` of int64 row hashes: the survey's digest parts, as
    Spark's ``sum(h & 0xFFFFFFFF)`` (a long) and ``bit_xor(h)`` give them (both signed)."""
    unsigned = np.asarray(hashes, dtype=np.int64).view(np.uint64)
    low = int((unsigned & np.uint64(_MASK32)).sum(dtype=np.uint64))
    xor = int(np.bitwise_xor.reduce(unsigned)) if len(unsigned) else 0
    return _signed(low), _signed(xor)


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value
