"""Training examples and histories against a plain Python reference on a hand-made log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA
from solaris_lib.model.examples import EventLists, build_examples

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _log(rows) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    return pa.table(dict(zip(REQUEST_LOG_SCHEMA.names, cols, strict=True)),
                    schema=REQUEST_LOG_SCHEMA)


def _random_log(seed: int, with_positions: bool = True) -> pa.Table:
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(60):
        user = int(rng.integers(0, 6))
        ts = T0 + timedelta(minutes=int(rng.integers(0, 600)))
        for k in range(5):
            shown = with_positions and k < 3
            clicked = None if (with_positions and not shown) else bool(rng.random() < 0.3)
            rows.append((f"r{r}", ts, user, int(rng.integers(0, 40)), k if shown else None,
                         clicked))
    return _log(rows)


def _reference(table: pa.Table, recent: int, clicks: int):
    """Per-request (user, history items, history clicks, targets, labels) by brute force: the
    newest ``recent`` events before the request and the newest ``clicks`` clicks before them."""
    rows = table.to_pylist()
    has_positions = any(r["position"] is not None for r in rows)
    events = [r for r in rows if r["position"] is not None or not has_positions]
    out = {}
    for r in rows:
        if r["clicked"] is None:
            continue
        req = out.setdefault(r["request_id"], {"user": r["user_id"], "ts": r["ts"], "t": []})
        req["t"].append((r["item_id"], float(r["clicked"])))
    for req in out.values():
        code = {None: 2, False: 0, True: 1}
        hist = sorted((e["ts"], e["item_id"], code[e["clicked"]]) for e in events
                      if e["user_id"] == req["user"] and e["ts"] < req["ts"])
        older = [h for h in hist[:max(0, len(hist) - recent)] if h[2] == 1]
        hist = (older[-clicks:] if clicks else []) + hist[-recent:]
        req["items"] = [h[1] for h in hist]
        req["clicks"] = [h[2] for h in hist]
        req["gaps"] = [(req["ts"] - h[0]).total_seconds() for h in hist]
        req["t"] = sorted(req["t"])
    return out


def _check_against_reference(table: pa.Table, recent: int, clicks: int = 0) -> None:
    ex = build_examples(table)
    ref = _reference(table, recent, clicks)
    assert len(ex) == len(ref) and ex.pairs == sum(len(r["t"]) for r in ref.values())
    batch = ex.batch(np.arange(len(ex)), recent, clicks)
    got = set()
    for i in range(len(ex)):
        m = batch["mask"][i]
        tm = batch["tmask"][i]
        key = (int(ex.user[i]), int(ex.ts_us[i]), tuple(batch["items"][i][m].tolist()),
               tuple(batch["clicks"][i][m].tolist()), tuple(batch["gaps"][i][m].tolist()),
               tuple(zip(batch["targets"][i][tm].tolist(), batch["labels"][i][tm].tolist(),
                         strict=True)))
        got.add(key)
    want = {(r["user"], int(r["ts"].timestamp() * 1e6), tuple(r["items"]), tuple(r["clicks"]),
             tuple(r["gaps"]), tuple(r["t"])) for r in ref.values()}
    assert got == want


def test_examples_match_reference_with_positions():
    _check_against_reference(_random_log(0), recent=4)


def test_histories_add_older_clicks():
    _check_against_reference(_random_log(0), recent=3, clicks=2)
    _check_against_reference(_random_log(2), recent=1, clicks=5)


def test_source_rows():
    table = _random_log(3)
    ex = build_examples(table)
    rows = table.to_pylist()
    for r in range(len(ex)):
        lo, hi = ex.t_offsets[r], ex.t_offsets[r + 1]
        source = [rows[i] for i in ex.t_rows[lo:hi]]
        assert [s["item_id"] for s in source] == ex.t_items[lo:hi].tolist()
        assert [float(s["clicked"]) for s in source] == ex.t_labels[lo:hi].tolist()
        assert {s["request_id"] for s in source} == {source[0]["request_id"]}
        assert all(s["user_id"] == ex.user[r] for s in source)


def test_examples_match_reference_without_positions():
    table = _random_log(1, with_positions=False)
    table = table.set_column(4, "position", pa.nulls(len(table), pa.int32()))
    _check_against_reference(table, recent=50)


def test_history_is_strictly_before_the_request():
    table = _log([
        ("a", T0, 1, 10, 0, True),
        ("b", T0 + timedelta(hours=1), 1, 11, 0, False),
        ("c", T0 + timedelta(hours=1), 1, 12, 0, True),  # same ts as b: not in b's history
    ])
    ex = build_examples(table)
    batch = ex.batch(np.arange(len(ex)), 5, 5)
    hist = [sorted(batch["items"][i][batch["mask"][i]].tolist()) for i in range(len(ex))]
    assert hist == [[], [10], [10]]


def test_logs_without_clicks_give_no_examples():
    table = _log([("a", T0, 1, 10, 0, None), ("b", T0, 2, 11, 0, None)])
    ex = build_examples(table)
    assert len(ex) == 0 and ex.pairs == 0 and len(ex.events.items) == 2


def test_user_history_table_and_unknown_users():
    ts_type = pa.timestamp("us", tz="UTC")
    asof = T0 + timedelta(days=1)
    table = pa.table({
        "user_id": pa.array([7, 3], pa.int64()),
        "item_ids": pa.array([[1, 2, 3], [9]], pa.list_(pa.int64())),
        "ts": pa.array([[T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)], [T0]],
                       pa.list_(ts_type)),
        "clicked": pa.array([[True, None, False], [None]], pa.list_(pa.bool_())),
        "asof": pa.array([asof, asof], ts_type),
    })
    events = EventLists.from_user_history(table)
    now = np.full(3, int(asof.timestamp() * 1e6))
    lo, hi = events.history_bounds(np.array([7, 5, 3]), now)
    out = events.history(lo, hi, now, 2)
    assert out["mask"].tolist() == [[True, True], [False, False], [False, True]]
    assert out["items"][0].tolist() == [2, 3] and out["clicks"][0].tolist() == [2, 0]
    assert out["gaps"][0].tolist() == [23 * 3600.0, 22 * 3600.0]
    assert out["items"][2, 1] == 9
