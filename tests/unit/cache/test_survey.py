"""The publisher's first pass (survey.py) on parquet files written here, without Spark:
problems counted, scattered users found, and the memory estimate grouped key by key."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from redis.crc import key_slot

from solaris_lib.cache import memory, slices
from solaris_lib.cache.format import bucket_key, bucket_of, cluster_key
from solaris_lib.cache.rowhash import digest_parts, row_hash
from solaris_lib.cache.rows import CLUSTER, EXACT, interpret
from solaris_lib.cache.survey import Layout, merge, survey_task

VERSION = "20260105T100000Z-0000000000"
LIMITS = memory.HashLimits(512, 160)


def _write(folder, name, users, items, id_column="item_id", id_type=None, dim=4,
           seed=0):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((len(users), dim)).astype("<f2")
    table = pa.table({"user_id": pa.array(users, pa.int64()),
                      id_column: pa.array(items, id_type or pa.int64()),
                      "model_version": pa.array(["m1"] * len(users)),
                      "embedding": pa.array([v.tobytes() for v in values], pa.binary())})
    folder.mkdir(exist_ok=True)
    pq.write_table(table, folder / name, row_group_size=4)
    return table


def _survey(folder, layout, tasks=2):
    plan = slices.plan(slices.describe(str(folder), check=layout.table.check_schema), tasks)
    return merge([survey_task([task], layout) for task in plan], layout.table)


def test_scattered_users_are_those_in_two_runs_or_two_files(tmp_path):
    folder = tmp_path / "t"
    a = _write(folder, "a.parquet", [1, 1, 1, 2, 2, 3, 2, 4, 4], [5, 6, 7, 1, 2, 1, 3, 8, 9])
    b = _write(folder, "b.parquet", [4, 5, 5], [10, 11, 12], seed=1)
    merged = _survey(folder, Layout(EXACT, 4, len(f"p:e:{VERSION}:{{"), LIMITS))
    found = interpret(merged.groups, "t")
    assert (found.rows, found.valid_rows, found.refused) == (12, 12, {})
    assert merged.scattered[("m1", 8)].tolist() == [2, 4]  # 2: two runs; 4: two files
    rows = pa.concat_tables([a, b])
    values = np.stack([np.frombuffer(v, np.uint8) for v in rows["embedding"].to_pylist()])
    low, xor = digest_parts(row_hash(rows["user_id"].to_numpy(), rows["item_id"].to_numpy(),
                                     values))
    mask = 2**64 - 1
    assert found.digest == f"{low & mask:016x}{xor & mask:016x}"


def test_the_estimate_sums_each_keys_bytes_on_its_users_slot(tmp_path):
    folder = tmp_path / "t"
    users = np.repeat([7, 12345, 99], [40, 25, 3])
    items = np.concatenate([np.arange(40) * 1000, np.arange(25) + 10**9, [1, 2, 3]])
    _write(folder, "a.parquet", users, items)
    head = len(f"p:e:{VERSION}:{{")
    part = _survey(folder, Layout(EXACT, 4, head, LIMITS), tasks=1).parts[("m1", 8)]
    want: dict[int, int] = {}
    keys = 0
    for user in (7, 12345, 99):
        mine = items[users == user]
        for bucket in range(4):
            fields = mine[bucket_of(mine, 4) == bucket]
            if not len(fields):
                continue
            keys += 1
            name = bucket_key("p", VERSION, user, bucket)
            size = memory.hash_bytes(np.array([len(fields)]),
                                     memory.listpack_int_bytes(fields).sum(keepdims=True),
                                     memory.hashtable_field_bytes(fields).sum(keepdims=True),
                                     8, len(name), LIMITS)[0]
            slot = key_slot(name.encode())
            want[slot] = want.get(slot, 0) + int(size)
    assert dict(zip(part.slots.tolist(), part.bytes.tolist(), strict=True)) == want
    assert part.keys == part.listpack_keys == keys


def test_cluster_rows_make_one_cluster_hash_per_user(tmp_path):
    folder = tmp_path / "c"
    _write(folder, "a.parquet", [3, 3, 3, 8], [0, 1, 2, 0], "cluster_id", pa.int32())
    head = len(f"p:e:{VERSION}:{{")
    part = _survey(folder, Layout(CLUSTER, 4, head, LIMITS), tasks=1).parts[("m1", 8)]
    assert part.keys == 2
    lengths = {len(cluster_key("p", VERSION, u)) for u in (3, 8)}
    want = sum(int(memory.hash_bytes(np.array([n]), memory.listpack_int_bytes(ids).sum(
        keepdims=True), memory.hashtable_field_bytes(ids).sum(keepdims=True), 8, length,
        LIMITS)[0]) for n, ids, length in ((3, np.arange(3), min(lengths)),
                                           (1, np.zeros(1, np.int64), min(lengths))))
    assert int(part.bytes.sum()) == want


def test_problem_rows_are_counted_and_left_out_of_the_groups(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(pa.table({"user_id": pa.array([1, None, 1], pa.int64()),
                             "item_id": pa.array([1, 2, -3], pa.int64()),
                             "model_version": pa.array(["m1", "m1", "m1"]),
                             "embedding": pa.array([b"\x00" * 8] * 3, pa.binary())}),
                   folder / "a.parquet")
    merged = _survey(folder, Layout(EXACT, 4, 30, LIMITS), tasks=1)
    found = interpret(merged.groups, "t")
    assert found.valid_rows == 1
    assert found.refused == {"null_user_id": 1, "negative_item_id": 1}
