"""Slices of parquet files: every row read once, runs of a user never cut in two."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.cache.slices import Slice, _Cursor, describe, owned_batches, plan


def _runs(users: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal ids (None counts as one id)."""
    keys = [None if u is None else int(u) for u in users]
    starts = [0] + [k for k in range(1, len(keys)) if keys[k] != keys[k - 1]]
    return list(zip(starts, starts[1:] + [len(keys)], strict=True))


def _file(tmp_path, users: list, group_rows: int, name: str = "part-0.parquet") -> str:
    table = pa.table({"user_id": pa.array(users, pa.int64()),
                      "row": pa.array(np.arange(len(users)), pa.int64())})
    path = tmp_path / name
    pq.write_table(table, path, row_group_size=group_rows)
    return str(path)


@pytest.mark.parametrize("seed", range(6))
def test_slices_read_every_row_once_and_never_cut_a_run(tmp_path, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, 60)
    users: list = np.repeat(rng.permutation(60), lengths).tolist()
    users[5] = None
    users[6] = None
    path = _file(tmp_path, users, group_rows=int(rng.integers(7, 90)))
    cuts = sorted(set(rng.integers(1, len(users), 8).tolist()) | {0, len(users)})
    pieces = [Slice(path, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    owned = [np.concatenate([b.column("row").to_numpy() for b in
                             owned_batches(p, ["user_id", "row"], batch_rows=13)] or [[]])
             for p in pieces]
    assert np.concatenate(owned).tolist() == list(range(len(users)))
    for start, stop in _runs(users):
        holders = [k for k, rows in enumerate(owned) if start in rows]
        assert all(row in owned[holders[0]] for row in range(start, stop))
        assert start < pieces[holders[0]].stop and start >= pieces[holders[0]].start


def test_a_run_longer_than_its_slices_belongs_to_the_first():
    pieces = [(0, 2), (2, 4), (4, 6)]
    users = [1, 7, 7, 7, 7, 2]
    owned = [_owned_rows(users, start, stop) for start, stop in pieces]
    assert owned == [[0, 1, 2, 3, 4], [], [5]]


def _owned_rows(users, start, stop):
    """Rows [start, stop) owns, fed to the cursor one row per batch."""
    cursor = _Cursor(start, stop)
    rows = []
    for position in range(len(users)):  # batches of one row
        lo, hi, done = cursor.step(np.array(users[position:position + 1]), position)
        rows.extend(range(position + lo, position + hi))
        if done:
            break
    return rows


def test_plan_balances_rows_and_snaps_to_row_groups(tmp_path):
    big = _file(tmp_path, list(range(1000)), group_rows=120, name="a.parquet")
    small = _file(tmp_path, list(range(30)), group_rows=100, name="b.parquet")
    files = describe(str(tmp_path))
    assert files == [(big, [120] * 8 + [40]), (small, [30])]
    tasks = plan(files, 4)
    assert len(tasks) == 4
    loads = sorted(sum(p.rows for p in task) for task in tasks)
    assert sum(loads) == 1030 and loads[-1] - loads[0] <= 60
    cuts = sorted(p.start for task in tasks for p in task if p.path == big)
    assert cuts == [0, 240, 480, 720]  # 250, 500, 750 moved to the nearby group boundaries
    assert plan(files, 1) == [[Slice(big, 0, 1000), Slice(small, 0, 30)]]
    assert plan([(big, [0])], 3) == []


def test_plan_cuts_one_row_group_into_equal_slices():
    tasks = plan([("f", [1_000_000])], 2)
    assert tasks == [[Slice("f", 0, 500_000)], [Slice("f", 500_000, 1_000_000)]]
