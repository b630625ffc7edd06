"""numpy helpers of the writer, each against a plain reference (the HSETs against hiredis's
packer, which redis-py uses)."""

import hiredis
import numpy as np
import pyarrow as pa

from solaris_lib.cache import pairs


def pack_command(*args):
    return hiredis.pack_command(args)


def test_fixed_width_values_views_sliced_arrays():
    values = [bytes([i] * 4) for i in range(6)]
    array = pa.array(values, pa.binary()).slice(2, 3)
    assert [row.tobytes() for row in pairs.fixed_width_values(array, 4)] == values[2:5]
    large = pa.array(values, pa.large_binary())
    assert pairs.fixed_width_values(large, 4).shape == (6, 4)
    assert pairs.fixed_width_values(pa.array([], pa.binary()), 4).shape == (0, 4)


def test_non_finite_detection_agrees_with_numpy_on_every_bit_pattern():
    halves = np.arange(65536, dtype=np.uint16).reshape(-1, 4)
    expected = ~np.isfinite(halves.view(np.float16)).all(axis=1)
    assert (pairs.non_finite_fp16(halves.view(np.uint8)) == expected).all()
    assert expected.any() and not expected.all()


def test_dedupe_keeps_the_smallest_copy_whatever_the_order():
    users = np.array([1, 1, 1, 1, 2, 2])
    items = np.array([5, 7, 7, 7, 5, 6])
    values = np.array([[0, 0], [9, 1], [3, 4], [3, 2], [1, 1], [1, 1]], dtype=np.uint8)
    keep = pairs.dedupe(users, items, values)
    assert keep.tolist() == [True, False, False, True, True, True]
    order = [0, 3, 1, 2, 4, 5]  # copies of (1, 7) in another order
    assert pairs.dedupe(users[order], items[order], values[order]).tolist() == \
        [True, True, False, False, True, True]


def test_sample_is_deterministic_and_near_its_rate():
    items = np.arange(200_000, dtype=np.int64)
    first = pairs.sampled(42, items, 100)
    assert (first == pairs.sampled(42, items, 100)).all()
    assert 1600 < first.sum() < 2400
    assert (first != pairs.sampled(43, items, 100)).any()
    assert pairs.sampled(42, items[:10], 1).all()


def test_hset_pieces_of_one_run_match_the_generic_packer():
    rng = np.random.default_rng(0)
    items = np.array([0, 5, 7, 12, 999, 123456789012, 2**62], dtype=np.int64)  # sorted
    values = rng.integers(0, 256, (len(items), 6), dtype=np.uint8)
    (pieces,) = pairs.hset_pieces([b"p:e:v:{3}"], np.array([0]), items, values)
    flat = [part for item, value in zip(items.tolist(), values, strict=True)
            for part in (str(item), value.tobytes())]
    assert b"".join(pieces) == pack_command("HSET", "p:e:v:{3}", *flat)


def test_binary_column_is_the_inverse_of_fixed_width_values():
    values = np.arange(24, dtype=np.uint8).reshape(4, 6)
    column = pairs.binary_column(values)
    assert column.type == pa.binary() and column[1].as_py() == bytes(range(6, 12))
    assert (pairs.fixed_width_values(column, 6) == values).all()
    halves = np.ones((2, 3), "<f2")
    assert pairs.binary_column(halves)[0].as_py() == halves[0].tobytes()


def _reference_order(users, parts, items):
    return sorted(range(len(users)), key=lambda k: (users[k], parts[k], items[k], k))


def test_key_order_groups_a_users_rows_by_part_stably():
    users = np.array([2, 2, 2, 5, 5, 5], dtype=np.int64)
    items = np.array([3, 4, 9, 1, 9, 9], dtype=np.int64)  # sorted by (user, item)
    parts = np.array([1, 0, 1, 3, 0, 0], dtype=np.int64)
    order = pairs.key_order(users, parts, items)
    assert order.tolist() == _reference_order(users, parts, items) == [1, 0, 2, 4, 5, 3]
    assert pairs.key_order(users, np.zeros(6, np.int64), items) is None  # already in order


def test_key_order_of_rows_in_any_order_whatever_the_range():
    rng = np.random.default_rng(4)
    for items in (rng.integers(0, 50, 300), rng.integers(0, 2**62, 300)):
        parts = rng.integers(0, 8, 300)
        for users in (rng.permutation(np.repeat([5, 1, 9], 100)), np.repeat([5, 1, 9], 100)):
            order = pairs.key_order(users, parts, items.astype(np.int64))
            assert order.tolist() == _reference_order(users, parts, items)
    users = np.repeat(np.arange(700), 50)  # sorted, 700 users: no int16 radix key
    items = np.tile(np.arange(50), 700)
    parts = rng.integers(0, 64, len(users))
    assert pairs.key_order(users, parts, items).tolist() == _reference_order(users, parts,
                                                                             items)


def test_hset_pieces_of_many_keys_pack_each_run_in_row_order():
    rng = np.random.default_rng(9)
    pool = np.r_[np.arange(120), 10 ** np.arange(15), rng.integers(0, 2**62, 50)]
    runs = [np.sort(rng.choice(pool, k, replace=False)) for k in (1, 7, 40, 3, 90)]
    items = np.concatenate(runs).astype(np.int64)
    values = rng.integers(0, 256, (len(items), 6), dtype=np.uint8)
    starts = np.cumsum([0] + [len(r) for r in runs[:-1]])
    keys = [f"p:e:v:{{{u}}}:0".encode() for u in range(len(runs))]
    got = [b"".join(pieces) for pieces in pairs.hset_pieces(keys, starts, items, values)]
    ends = np.r_[starts[1:], len(items)]
    for command, key, a, b in zip(got, keys, starts, ends, strict=True):
        flat = [part for f, v in zip(items[a:b].tolist(), values[a:b], strict=True)
                for part in (str(f), v.tobytes())]
        assert command == pack_command("HSET", key, *flat)
    assert pairs.hset_pieces([], np.zeros(0, np.int64), items[:0], values[:0]) == []
