"""RESP2 packing and the key-slot hash, against the protocol and Redis Cluster specs."""

import numpy as np
import pytest
from redis.crc import key_slot as redis_py_key_slot

from solaris_lib.cache.errors import CacheTimeoutError
from solaris_lib.cache.nodes import hash_tag, key_slot, user_slots
from solaris_lib.cache.resp import pack_command, pack_hmget, remaining


def test_pack_command_is_an_array_of_bulk_strings():
    assert pack_command("GET", "k") == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    expire = b"*3\r\n$6\r\nEXPIRE\r\n$2\r\nk\x00\r\n$2\r\n10\r\n"
    assert pack_command("EXPIRE", b"k\x00", 10) == expire
    assert pack_command("SET", "k", "") == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"


def test_pack_hmget_matches_the_generic_packer():
    key = "p:e:v:{7}"
    for fields in (["1", "22", "333333333333"], ["11", "22", "33"], ["9"], []):
        assert pack_hmget(key, fields) == pack_command("HMGET", key, *fields)
    assert pack_hmget(key, ["5"]) == b"*3\r\n$5\r\nHMGET\r\n$9\r\np:e:v:{7}\r\n$1\r\n5\r\n"


def test_key_slot_follows_the_cluster_spec():
    assert key_slot(b"123456789") == 12739  # the CRC16 test vector of the cluster spec (0x31C3)
    for key in (b"solaris:e:v:{42}", b"{user1000}.following", b"foo{}{bar}", b"plain", b"a{b"):
        assert key_slot(hash_tag(key)) == redis_py_key_slot(key)


def test_hash_tag_rules():
    assert hash_tag("p:e:v:{42}") == b"42"
    assert hash_tag("foo{}{bar}") == b"foo{}{bar}"  # an empty first tag: the whole key
    assert hash_tag("{a}{b}") == b"a"
    assert hash_tag("solaris:alias") == b"solaris:alias"


def test_a_passed_deadline_is_a_timeout():
    with pytest.raises(CacheTimeoutError):
        remaining(0.0)


def test_user_slots_equal_key_slot_of_the_decimal_ids():
    rng = np.random.default_rng(2)
    users = np.r_[0, 1, 9, 10, 99, 100, 10**18 - 1, 10**18, 2**63 - 1, -1, -3, -2**63,
                  rng.integers(0, 2**63 - 1, 500), rng.integers(0, 10**6, 500)]
    assert user_slots(users).tolist() == [redis_py_key_slot(str(u).encode()) for u in
                                          users.tolist()]
    assert user_slots(np.zeros(0, np.int64)).tolist() == []

