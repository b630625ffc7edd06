"""The numpy twin of Spark's xxhash64 against values Spark computed (``F.xxhash64`` on the
same rows, Spark 4.x; ``tests/integration/cache/test_inputs.py`` compares on random rows)."""

import numpy as np

from solaris_lib.cache.rowhash import digest_parts, row_hash

# (user_id, item_id, embedding) -> Spark's xxhash64(user_id, item_id, embedding)
SPARK = [
    ((0, 0, b""), -3588088069419918364),
    ((1, 2, bytes(range(3))), 6697714740899383450),
    ((42, 7, bytes(range(4))), -2953016119741167968),
    ((-1, 2**63 - 1, bytes(range(31))), -5255392869087377401),
    ((2**63 - 1, 5, bytes(range(32))), 7370588520481154838),
    ((-2**63, 123456789, bytes(range(100, 228))), -4504585318710686058),
    ((7, 8, bytes(range(45))), 4728075365318288112),
]
# sum(h & 0xFFFFFFFF), bit_xor(h) of the seven rows, as Spark aggregates them
SPARK_PARTS = (12601330625, 1475725267197925033)


def _hash(user, item, embedding):
    rows = np.frombuffer(embedding, np.uint8).reshape(1, len(embedding))
    return int(row_hash(np.array([user]), np.array([item]), rows)[0])


def test_row_hash_equals_spark_on_every_length_branch():
    assert [_hash(*row) for row, _ in SPARK] == [want for _, want in SPARK]


def test_rows_of_one_length_hash_as_one_by_one():
    rng = np.random.default_rng(1)
    users = rng.integers(-2**63, 2**63 - 1, 50, dtype=np.int64)
    items = rng.integers(0, 2**63 - 1, 50, dtype=np.int64)
    rows = rng.integers(0, 256, (50, 40), dtype=np.uint8)
    together = row_hash(users, items, rows)
    assert together.dtype == np.int64
    assert together.tolist() == [_hash(u, i, r.tobytes()) for u, i, r in
                                 zip(users.tolist(), items.tolist(), rows, strict=True)]


def test_digest_parts_equal_spark_aggregates():
    hashes = np.array([want for _, want in SPARK], dtype=np.int64)
    assert digest_parts(hashes) == SPARK_PARTS
    assert digest_parts(hashes[::-1]) == SPARK_PARTS
    assert digest_parts(np.zeros(0, np.int64)) == (0, 0)
