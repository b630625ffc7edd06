"""The memory estimate's building blocks, against jemalloc's and listpack's documented sizes.

(The estimate as a whole is compared with INFO memory of a real server in the integration
tests.)
"""

import numpy as np
import pytest

from solaris_lib.cache import memory


@pytest.mark.parametrize("request_bytes, allocated", [
    (1, 8), (8, 8), (9, 16), (17, 32), (100, 112), (128, 128), (129, 160), (132, 160),
    (257, 320), (1025, 1280), (4097, 5120), (16385, 20480), (27407, 28672), (34257, 40960),
])
def test_size_classes(request_bytes, allocated):
    assert int(memory.size_class(request_bytes)) == allocated


@pytest.mark.parametrize("item, size", [
    (0, 2), (127, 2), (128, 3), (4095, 3), (4096, 4), (32767, 4), (32768, 5), (8388607, 5),
    (8388608, 6), (2147483647, 6), (2147483648, 10), (2**62, 10),
])
def test_listpack_integer_entries(item, size):
    # 7-bit uint, 13-bit, 16-bit, 24-bit, 32-bit and 64-bit int encodings + 1 back-length byte
    assert int(memory.listpack_int_bytes(np.array([item]))[0]) == size


@pytest.mark.parametrize("length, size", [(0, 2), (63, 65), (64, 67), (126, 130), (128, 132),
                                          (4096, 4103)])
def test_listpack_string_entries(length, size):
    # 6-bit length up to 63, 12-bit up to 4095, then 32-bit; back-length 1 byte below 128
    assert memory.listpack_string_bytes(length) == size


def test_decimal_digits_and_hashtable_fields():
    items = np.array([0, 9, 10, 999999, 10**6, 10**13, 10**14, 2**63 - 1])
    assert memory.decimal_digits(items).tolist() == [1, 1, 2, 6, 7, 14, 15, 19]
    # dictEntry (32) + sds type 5 (digits + 2 bytes) in its size class
    assert memory.hashtable_field_bytes(items).tolist() == [40, 40, 40, 40, 48, 48, 64, 64]


def test_hash_bytes_by_hand():
    limits = memory.HashLimits(max_entries=512, max_value=160)
    key_cost = 64 + 16 + 2 * (32 + 12)  # key name of 45 bytes (type 8 sds: 49 -> 64) ...
    # two fields, ids 1 and 2: listpack 7 + 2 * (2 + 132) = 275 -> 320
    listpack = memory.hash_bytes(np.array([2]), np.array([4]), np.array([80]), 128, 45, limits)
    assert listpack.tolist() == [320 + 16 + key_cost]
    # hashtable (values above max_value): dict 64 + 4 buckets * 8 + fields 80 + 2 * 160
    tight = memory.HashLimits(max_entries=512, max_value=64)
    table = memory.hash_bytes(np.array([2]), np.array([4]), np.array([80]), 128, 45, tight)
    assert table.tolist() == [64 + 32 + 80 + 320 + 16 + key_cost]
    assert memory.is_listpack(np.array([2, 513]), 128, limits).tolist() == [True, False]
    assert not memory.is_listpack(np.array([2]), 128, tight).any()


def test_encoding_follows_both_limits():
    limits = memory.HashLimits(max_entries=100, max_value=140)
    assert limits.encoding(100, 128) == "listpack"
    assert limits.encoding(101, 128) == "hashtable"
    assert limits.encoding(10, 256) == "hashtable"


def test_free_bytes_prefers_maxmemory():
    assert memory.free_bytes({"used_memory": 100, "maxmemory": 1000})[:2] == (900, 1000)
    free, limit, what = memory.free_bytes({"used_memory": 100, "maxmemory": 0,
                                           "total_system_memory": 5000})
    assert (free, limit) == (4900, 5000) and "total_system_memory" in what
    assert memory.with_margin(1000) == 1100


def test_the_shipped_redis_conf_keeps_dim_64_users_in_listpacks():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[3] / "infra" / "redis.conf"
    limits = memory.HashLimits.from_redis_conf(conf.read_text())
    assert limits.encoding(300, 128) == "listpack"
    assert limits.server_args() == ["--hash-max-listpack-entries", str(limits.max_entries),
                                    "--hash-max-listpack-value", str(limits.max_value)]
    assert memory.HashLimits.from_redis_conf("# nothing\n") == memory.HashLimits(
        source="redis.conf")
