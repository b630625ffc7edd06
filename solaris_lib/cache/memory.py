"""How many bytes of Redis memory a version will take, before writing a byte of it.

The estimate follows Redis 7's data structures (64-bit, jemalloc) key by key, because the two
hash encodings differ by a third. Every field of a user's hashes is a decimal integer (an item
id, or a cluster id in the user's cluster key):

* **listpack** (``hash-max-listpack-entries`` >= the hash's fields and every value
  <= ``hash-max-listpack-value`` bytes): one allocation of 7 header bytes plus, per field, the
  id as a listpack integer (2-10 bytes with its back-length) and the value (2 + len + 2
  bytes for a 128-byte value), rounded up to a jemalloc size class.
* **hashtable**: a dict (64 bytes) with ``8 * next_pow2(fields)`` bytes of buckets and, per
  field, a dictEntry (32), the field sds (type 5, ``digits + 2``) and the value sds (type 8,
  ``len + 4``: a 128-byte value takes the 160-byte class), each rounded to its size class.

Every key also costs its name (sds), a robj, and a dictEntry plus bucket share in the keyspace
and in the expires dict. The functions are vectorised (numpy) so that Spark executors estimate
millions of keys in one pass; tests compare them with ``INFO memory`` of a real server.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_MAX_ENTRIES = 512  # Redis 7 defaults
DEFAULT_MAX_VALUE = 64
DICT_ENTRY = 32  # 24-byte dictEntry in jemalloc's 32-byte class
ROBJ = 16
DICT_STRUCT = 64
BUCKET_SHARE = 12  # average bytes of bucket array per key (load factor 0.5-1, 8 bytes a slot)
LISTPACK_OVERHEAD = 7
SAFETY_MARGIN = 0.10  # added to the estimate before comparing with free memory


@dataclass(frozen=True)
class HashLimits:
    """The server's listpack thresholds for hashes (``CONFIG GET hash-max-listpack-*``)."""

    max_entries: int = DEFAULT_MAX_ENTRIES
    max_value: int = DEFAULT_MAX_VALUE
    source: str = "redis defaults (CONFIG GET not permitted)"

    @classmethod
    def from_redis_conf(cls, text: str, source: str = "redis.conf") -> HashLimits:
        """The limits a redis.conf sets (Redis defaults for the lines it lacks)."""
        lines = (line.split(None, 1) for line in text.splitlines()
                 if not line.lstrip().startswith("#"))
        settings = {parts[0]: parts[1].strip() for parts in lines if len(parts) == 2}
        return cls(int(settings.get("hash-max-listpack-entries", DEFAULT_MAX_ENTRIES)),
                   int(settings.get("hash-max-listpack-value", DEFAULT_MAX_VALUE)), source)

    def server_args(self) -> list[str]:
        """These limits as redis-server command-line arguments."""
        return ["--hash-max-listpack-entries", str(self.max_entries),
                "--hash-max-listpack-value", str(self.max_value)]

    def encoding(self, fields: int, value_bytes: int) -> str:
        """The encoding Redis gives a hash of ``fields`` values of ``value_bytes``."""
        fits = fields <= self.max_entries and value_bytes <= self.max_value
        return "listpack" if fits else "hashtable"


def size_class(n: np.ndarray | int) -> np.ndarray:
    """jemalloc's allocation size for requests of ``n`` bytes (x86-64, 16-byte quantum).

    8; multiples of 16 up to 128; then four classes per power of two (160, 192, 224, 256,
    320, ...), which also holds for large allocations (16 KiB, 20 KiB, 24 KiB, 28 KiB, 32 KiB...).
    """
    size = np.maximum(np.asarray(n, dtype=np.int64), 1)
    small = np.where(size <= 8, 8, (size + 15) // 16 * 16)
    exponent = np.floor(np.log2(np.maximum(size - 1, 1))).astype(np.int64)
    step = np.left_shift(1, np.maximum(exponent - 2, 0))
    large = (size + step - 1) // step * step
    return np.where(size <= 128, small, large)


def listpack_int_bytes(items: np.ndarray) -> np.ndarray:
    """Bytes of non-negative integers as listpack entries, back-length byte included."""
    items = np.asarray(items, dtype=np.int64)
    bounds = np.array([127, 4095, 32767, 8388607, 2147483647], dtype=np.int64)
    sizes = np.array([2, 3, 4, 5, 6, 10], dtype=np.int64)
    return sizes[np.searchsorted(bounds, items, side="left")]


def listpack_string_bytes(length: int) -> int:
    """Bytes of a string entry of ``length`` bytes in a listpack, back-length included."""
    header = 1 if length < 64 else 2 if length < 4096 else 5
    entry = header + length
    backlen = 1 if entry < 128 else 2 if entry < 16384 else 3 if entry < 2097152 else 4
    return entry + backlen


def decimal_digits(items: np.ndarray) -> np.ndarray:
    """Number of decimal digits of non-negative integers."""
    items = np.asarray(items, dtype=np.int64)
    powers = np.array([10**k for k in range(1, 19)], dtype=np.int64)
    return np.searchsorted(powers, items, side="right") + 1


def hashtable_field_bytes(items: np.ndarray) -> np.ndarray:
    """Bytes of one hashtable field per item: dictEntry plus the field's sds."""
    return DICT_ENTRY + sds_bytes(decimal_digits(items))


def string_key_bytes(key_length: int, value_length: int) -> int:
    """Bytes of a string key holding ``value_length`` raw bytes (the fallback's chunks):
    the key's overhead, a robj and the value's sds (header of 3, 5 or 9 bytes plus the NUL)."""
    header = 4 if value_length < 256 else 6 if value_length < 65536 else 10
    return int(key_overhead(key_length) + ROBJ + size_class(value_length + header))


def sds_bytes(length: np.ndarray | int) -> np.ndarray:
    """Allocation of an sds string of ``length`` bytes (type 5 header below 32, else type 8)."""
    length = np.asarray(length, dtype=np.int64)
    return size_class(length + np.where(length < 32, 2, 4))


def key_overhead(key_length: np.ndarray | int) -> np.ndarray:
    """Bytes every key costs besides its value: name, robj, keyspace and expires entries."""
    return sds_bytes(key_length) + ROBJ + 2 * (DICT_ENTRY + BUCKET_SHARE)


def hash_bytes(
    fields: np.ndarray, lp_field_sum: np.ndarray, ht_field_sum: np.ndarray,
    value_bytes: int, key_length: np.ndarray | int, limits: HashLimits,
) -> np.ndarray:
    """Estimated bytes of each hash key (vectorised over keys).

    ``fields``: (k,) values per key; ``lp_field_sum`` / ``ht_field_sum``: (k,) sums of
    :func:`listpack_int_bytes` / :func:`hashtable_field_bytes` over the key's field ids;
    ``key_length``: (k,) or one length of the keys' names.
    """
    fields = np.asarray(fields, dtype=np.int64)
    entries = lp_field_sum + fields * listpack_string_bytes(value_bytes)
    listpack = size_class(LISTPACK_OVERHEAD + entries)
    buckets = 8 * np.left_shift(1, np.ceil(np.log2(np.maximum(fields, 4))).astype(np.int64))
    value_sds = int(sds_bytes(value_bytes))
    hashtable = DICT_STRUCT + buckets + ht_field_sum + fields * value_sds
    return np.where(is_listpack(fields, value_bytes, limits), listpack,
                    hashtable) + ROBJ + key_overhead(key_length)


def is_listpack(fields: np.ndarray, value_bytes: int, limits: HashLimits) -> np.ndarray:
    """(k,) True for the hashes of ``fields`` (k,) values that Redis keeps as a listpack."""
    return (np.asarray(fields) <= limits.max_entries) & (value_bytes <= limits.max_value)


def free_bytes(info: dict[str, int]) -> tuple[int, int, str]:
    """``(free, limit, what the limit is)`` from ``INFO memory`` fields.

    With ``maxmemory`` 0 Redis is bounded by the machine only: the limit is then
    ``total_system_memory`` (set maxmemory in production; ``infra/redis.conf`` does).
    """
    used = int(info["used_memory"])
    maxmemory = int(info.get("maxmemory", 0))
    if maxmemory > 0:
        return maxmemory - used, maxmemory, "maxmemory"
    total = int(info.get("total_system_memory", 0))
    return total - used, total, "total_system_memory (maxmemory is 0)"


def with_margin(estimate: int) -> int:
    """The bytes a publish requires free: the estimate plus :data:`SAFETY_MARGIN`."""
    return int(estimate * (1.0 + SAFETY_MARGIN))
