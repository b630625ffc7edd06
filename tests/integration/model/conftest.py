"""A tiny simulated world with a data root, and the inputs batch inference reads (built here
with plain pyarrow, independently of the model code)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from solaris_lib.config import load_settings
from solaris_lib.intervals import Interval
from solaris_lib.layout import MINED, SPECULATED, DataLayout
from solaris_lib.storage import atomic_folder

WINDOW = Interval(datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 8, tzinfo=UTC))
INFER = Interval(datetime(2026, 1, 7, 23, tzinfo=UTC), datetime(2026, 1, 8, tzinfo=UTC))
UNKNOWN_USER = 10**9
UNKNOWN_ITEM = 10**10


@pytest.fixture(scope="session")
def model_data_root(tmp_path_factory):
    """A data root holding a 200-user, 3-day simulated world's logs."""
    from solaris_lib.simulate.config import WorldConfig
    from solaris_lib.simulate.world import Simulator

    root = tmp_path_factory.mktemp("model-world")
    Simulator(WorldConfig(users=200, items=300, days=3, seed=5)).run(str(root / "logs"))
    return root


def user_history_table(logs: pa.Table, asof: datetime, max_history: int = 200) -> pa.Table:
    """The mined user-history contract from raw logs: shown rows before ``asof``, oldest first."""
    ts_type = pa.timestamp("us", tz="UTC")
    rows = logs.filter(pc.and_(pc.is_valid(logs["position"]),
                               pc.less(logs["ts"], pa.scalar(asof, ts_type))))
    rows = rows.sort_by([("user_id", "ascending"), ("ts", "ascending"),
                         ("item_id", "ascending")])
    out = {"user_id": [], "item_ids": [], "ts": [], "clicked": []}
    for user, group in _groups(rows):
        out["user_id"].append(user)
        out["item_ids"].append(group["item_id"].to_pylist()[-max_history:])
        out["ts"].append(group["ts"].to_pylist()[-max_history:])
        out["clicked"].append(group["clicked"].to_pylist()[-max_history:])
    n = len(out["user_id"])
    return pa.table({
        "user_id": pa.array(out["user_id"], pa.int64()),
        "item_ids": pa.array(out["item_ids"], pa.list_(pa.int64())),
        "ts": pa.array(out["ts"], pa.list_(ts_type)),
        "clicked": pa.array(out["clicked"], pa.list_(pa.bool_())),
        "asof": pa.array([asof] * n, ts_type),
    })


def _groups(rows: pa.Table):
    users = rows["user_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]]) if len(users) else []
    ends = list(starts[1:]) + [len(users)]
    for start, end in zip(starts, ends, strict=True):
        yield int(users[start]), rows.slice(start, end - start)


def speculated_table(logs: pa.Table, users: int = 25, per_user: int = 12) -> pa.Table:
    """Pairs for ``users`` logged users (items they were offered), plus an unknown user and an
    unknown item; duplicates included on purpose."""
    rng = np.random.default_rng(0)
    all_users = np.unique(logs["user_id"].to_numpy())
    chosen = rng.choice(all_users, users, replace=False)
    items = np.unique(logs["item_id"].to_numpy())
    u = np.repeat(chosen, per_user)
    i = rng.choice(items, len(u))
    u = np.r_[u, [UNKNOWN_USER] * 3, chosen[0], chosen[0]]
    i = np.r_[i, items[:2], UNKNOWN_ITEM, UNKNOWN_ITEM, i[0]]
    return pa.table({
        "user_id": pa.array(u, pa.int64()), "item_id": pa.array(i, pa.int64()),
        "score": pa.array(np.ones(len(u))),
        "sources": pa.array([["repeat"]] * len(u), pa.list_(pa.string())),
    })


def write_partition(path: str, table: pa.Table) -> None:
    with atomic_folder(path) as staging:
        pq.write_table(table, f"{staging}/part-0.parquet")


@pytest.fixture(scope="session")
def inference_inputs(model_data_root):
    """Writes speculated/ and mined/user_history/ of INFER; returns (settings, pairs, history).

    The first speculated user is left out of the history table (no history row)."""
    from solaris_lib.logs.reader import read_window

    settings = load_settings(data_root=str(model_data_root))
    layout = DataLayout.from_settings(settings)
    logs = read_window(layout.logs, WINDOW).table
    pairs = speculated_table(logs)
    history = user_history_table(logs, INFER.end)
    missing = pairs["user_id"][1].as_py()
    history = history.filter(pc.not_equal(history["user_id"], missing))
    write_partition(layout.output(SPECULATED, INFER), pairs)
    write_partition(layout.output(MINED, INFER, "user_history"), history)
    return settings, pairs, history
