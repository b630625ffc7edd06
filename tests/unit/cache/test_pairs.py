"""numpy helpers of the writer, each against a plain reference."""

import numpy as np
import pyarrow as pa

from solaris_lib.cache import pairs
from solaris_lib.cache.resp import pack_command


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


def test_sort_runs_orders_by_user_then_item_and_keeps_copies_in_order():
    users = np.array([5, 5, 5, 2, 2], dtype=np.int64)
    items = np.array([9, 1, 9, 4, 3], dtype=np.int64)
    values = np.arange(10, dtype=np.uint8).reshape(5, 2)
    got_users, got_items, got_values = pairs.sort_runs(users, items, values)
    assert got_users.tolist() == [2, 2, 5, 5, 5] and got_items.tolist() == [3, 4, 1, 9, 9]
    assert got_values[:, 0].tolist() == [8, 6, 2, 0, 4]  # the two (5, 9) copies keep order
    ordered = pairs.sort_runs(got_users, got_items, got_values)
    assert all(a is b for a, b in zip(ordered, (got_users, got_items, got_values), strict=True))


def test_hset_pieces_of_many_users_pack_each_run_in_row_order():
    rng = np.random.default_rng(9)
    pool = np.r_[-1 - np.arange(120), 10 ** np.arange(15), rng.integers(0, 2**62, 50)]
    runs = [np.sort(rng.choice(pool, k, replace=False)) for k in (1, 7, 40, 3, 90)]
    items = np.concatenate(runs).astype(np.int64)
    values = rng.integers(0, 256, (len(items), 6), dtype=np.uint8)
    starts = np.cumsum([0] + [len(r) for r in runs[:-1]])
    keys = [f"p:e:v:{{{u}}}".encode() for u in range(len(runs))]
    got = [b"".join(pieces) for pieces in pairs.hset_pieces(keys, starts, items, values)]
    ends = np.r_[starts[1:], len(items)]
    for command, key, a, b in zip(got, keys, starts, ends, strict=True):
        fields = [str(i) if i >= 0 else f"c{-1 - i}" for i in items[a:b].tolist()]
        flat = [part for f, v in zip(fields, values[a:b], strict=True)
                for part in (f, v.tobytes())]
        assert command == pack_command("HSET", key, *flat)
    assert pairs.hset_pieces([], np.zeros(0, np.int64), items[:0], values[:0]) == []


def test_sort_runs_orders_by_user_then_item_stably_whatever_the_range():
    rng = np.random.default_rng(4)
    for items in (rng.integers(0, 50, 300), rng.integers(-2**62, 2**62, 300)):
        values = np.arange(300, dtype=np.int32).reshape(300, 1)
        mixed = rng.permutation(np.repeat([5, 1, 9], 100))  # users apart
        runs = np.repeat([5, 1, 9], 100)  # one run each
        for users in (mixed, runs):
            got = pairs.sort_runs(users, items.astype(np.int64), values)
            order = sorted(range(300), key=lambda k: (users[k], items[k], k))
            assert got[0].tolist() == users[order].tolist()
            assert got[1].tolist() == items[order].tolist()
            assert got[2][:, 0].tolist() == order
