"""Simulator throughput: rows/s writing a world of about 10 million rows to parquet.

The floor measured in the same run is pyarrow writing the same number of rows of the same
schema from prepared arrays (no simulation): ``ratio`` = simulator rows/s / floor rows/s.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from solaris_lib.logs.schema import WITH_EVAL_SCHEMA
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.world import Simulator


def write_floor(rows: int, files: int, out: Path) -> float:
    """Seconds to write ``rows`` contract rows as ``files`` parquet files, data prepared."""
    per_file = rows // files
    rng = np.random.default_rng(0)
    table = pa.Table.from_pydict({
        "request_id": pa.array(np.repeat([f"r-{i:08d}" for i in range(per_file // 50 + 1)], 50)[:per_file]),
        "ts": pa.array(np.sort(rng.integers(0, 3_600_000_000, per_file)) + 1_767_571_200_000_000,
                       WITH_EVAL_SCHEMA.field("ts").type),
        "user_id": rng.integers(0, 2**40, per_file),
        "item_id": rng.integers(0, 2**40, per_file),
        "position": pa.array(rng.integers(0, 8, per_file).astype(np.int32)),
        "clicked": pa.array(rng.random(per_file) < 0.05),
        "p_click": pa.array(rng.random(per_file).astype(np.float32)),
    }, schema=WITH_EVAL_SCHEMA)
    started = time.perf_counter()
    for i in range(files):
        pq.write_table(table, out / f"part-{i:05d}.parquet", compression="zstd")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=8_000)
    parser.add_argument("--days", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    work = Path(tempfile.mkdtemp(prefix="solaris-bench-sim-"))
    try:
        cfg = WorldConfig(users=args.users, items=args.items, days=args.days, seed=1)
        result = Simulator(cfg).run(str(work / "world"))
        (work / "floor").mkdir()
        floor_s = write_floor(result.rows, result.files, work / "floor")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor_rate = result.rows / floor_s
    print(json.dumps({
        "benchmark": "simulate",
        "rows": result.rows,
        "seconds": round(result.seconds, 2),
        "rows_per_s": round(result.rows_per_s),
        "floor_write_rows_per_s": round(floor_rate),
        "ratio": round(result.rows_per_s / floor_rate, 3),
        "seconds_per_10m_rows": round(result.seconds * 1e7 / result.rows, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }))


if __name__ == "__main__":
    main()
