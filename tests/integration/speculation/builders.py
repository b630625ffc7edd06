"""Hand-built request logs for speculation tests, and pure-Python reference computations."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def row(request, hours, user, item, position=None, clicked=None):
    """One log row ``hours`` after T0."""
    return {"request_id": request, "ts": T0 + timedelta(hours=hours), "user_id": user,
            "item_id": item, "position": position, "clicked": clicked}


def write_logs(root: Path, rows: list[dict], *, drop: tuple[str, ...] = ()) -> Path:
    """Write ``rows`` as contract parquet, one file per hour partition; ``drop`` optional columns."""
    by_hour = defaultdict(list)
    for r in rows:
        by_hour[r["ts"].replace(minute=0, second=0, microsecond=0)].append(r)
    for hour, part in by_hour.items():
        folder = root / hour_partition(hour)
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(part, schema=REQUEST_LOG_SCHEMA)
        pq.write_table(table.drop_columns(list(drop)), folder / "part-0.parquet")
    return root


def decay(end: datetime, ts: datetime, half_life_s: float) -> float:
    return 2.0 ** (-(end - ts).total_seconds() / half_life_s)


def expected_pair_stats(rows, end, half_life_s, recent_half_life_s=3600.0):
    """{(user, item): (times_scored, times_shown, clicks, first, last, decayed, recent_decayed)}."""
    out = {}
    for key in sorted({(r["user_id"], r["item_id"]) for r in rows}):
        mine = [r for r in rows if (r["user_id"], r["item_id"]) == key]
        clicks = [r["clicked"] for r in mine if r["clicked"] is not None]
        out[key] = (len(mine), sum(r["position"] is not None for r in mine),
                    sum(clicks) if clicks else None, min(r["ts"] for r in mine),
                    max(r["ts"] for r in mine), sum(decay(end, r["ts"], half_life_s) for r in mine),
                    sum(decay(end, r["ts"], recent_half_life_s) for r in mine))
    return out


def expected_history(rows, max_history, max_clicks=0):
    """{user: [item ids oldest first]} of shown rows, or of all rows when none has a position:
    the newest ``max_history`` and, before them, the newest ``max_clicks`` clicked ones."""
    shown = [r for r in rows if r["position"] is not None] or list(rows)
    out = {}
    for user in sorted({r["user_id"] for r in shown}):
        mine = sorted((r["ts"], r["request_id"], r["item_id"], bool(r["clicked"]))
                      for r in shown if r["user_id"] == user)
        older = [e for e in mine[:max(0, len(mine) - max_history)] if e[3]]
        kept = (older[-max_clicks:] if max_clicks else []) + mine[-max_history:]
        out[user] = [e[2] for e in kept]
    return out


def expected_cooccurrence(rows, items_per_user, top_n):
    """{item: [(neighbour, shared users)...]} best first, from each user's most-scored items."""
    counts = defaultdict(int)
    for r in rows:
        counts[(r["user_id"], r["item_id"])] += 1
    top = defaultdict(list)
    for (user, item), _n in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        if len(top[user]) < items_per_user:
            top[user].append(item)
    shared = defaultdict(int)
    for items in top.values():
        for a in items:
            for b in items:
                if a != b:
                    shared[(a, b)] += 1
    out = defaultdict(list)
    for (a, b), n in sorted(shared.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        if len(out[a]) < top_n:
            out[a].append((b, n))
    return dict(out)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
