"""Bad request logs through ``solaris validate-logs``, ``read_window`` and ``read_window_spark``.

Already covered elsewhere (not repeated): a truncated file and a missing or mistyped column
(tests/unit/logs/test_validate.py, tests/integration/test_cli_logs.py), null ids through the CLI
and the Spark reader, an empty window (tests/integration/test_log_readers.py).

Duplicates: a row repeating an earlier row's (request_id, item_id) in the same file is
quarantined as ``duplicate_row``; the first copy (in file order) is kept. Files are validated
independently (the Spark reader reads them in parallel), so copies in two different files are
both kept: docs/operations.md says how to find them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.errors import LogContractError
from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import (
    contract_errors_from_executors,
    read_window,
    read_window_spark,
)
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA
from solaris_lib.logs.validate import validate_file

pytestmark = pytest.mark.integration
HOUR = datetime(2026, 1, 5, 10, tzinfo=UTC)
WINDOW = Interval(HOUR, HOUR + timedelta(hours=1))


def logs(n: int, *, users=None, first_item: int = 0) -> dict:
    """``n`` clean rows of the 10:00 hour: 10 candidates per request."""
    return {
        "request_id": [f"r{i // 10}" for i in range(n)],
        "ts": pa.array([HOUR + timedelta(microseconds=i * 1000) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(users if users is not None else [i // 10 % 50 for i in range(n)],
                            pa.int64()),
        "item_id": pa.array(np.arange(first_item, first_item + n), pa.int64()),
        "position": pa.array([i % 10 for i in range(n)], pa.int32()),
        "clicked": [i % 13 == 0 for i in range(n)],
    }


def write(root, table, name="part-0.parquet"):
    folder = root / "dt=2026-01-05" / "hour=10"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(table if isinstance(table, pa.Table) else pa.table(table), path)
    return path


def solaris(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solaris_lib.cli", *args],
                          capture_output=True, text=True, timeout=300)


def last_json(run: subprocess.CompletedProcess) -> dict:
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_corrupt_pages_behind_a_valid_footer_are_a_file_error_everywhere(tmp_path, spark):
    path = write(tmp_path, logs(5000))
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 200] = bytes(b ^ 0xFF for b in data[middle : middle + 200])
    path.write_bytes(bytes(data))
    pq.read_schema(path)  # the footer still reads: only the pages are damaged
    with pytest.raises(LogContractError, match="unreadable parquet file"):
        validate_file(str(path), str(tmp_path), None)
    with pytest.raises(LogContractError, match="unreadable parquet file"):
        read_window(str(tmp_path), WINDOW)
    run = solaris("validate-logs", str(tmp_path))
    assert run.returncode == 2 and f"{path}: unreadable parquet file" in run.stderr
    frame = read_window_spark(spark, str(tmp_path), WINDOW)
    with pytest.raises(LogContractError, match="unreadable parquet file") as caught:
        with contract_errors_from_executors():
            frame.count()
    assert caught.value.path == str(path) and caught.value.exit_code == 2


def test_renamed_column_is_a_specific_error_and_an_extra_one_is_tolerated(tmp_path):
    table = pa.table(logs(30))
    write(tmp_path, table.rename_columns(["request_id", "ts", "uid", "item_id", "position",
                                          "clicked"]))
    run = solaris("validate-logs", str(tmp_path))
    assert run.returncode == 2
    assert "required column(s) missing: user_id (found: request_id, ts, uid," in run.stderr
    write(tmp_path, table.append_column("experiment", pa.array(["a"] * 30)))
    run = solaris("validate-logs", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    (report,) = last_json(run)["reports"]
    assert report["rows_valid"] == 30 and "extra column(s) ignored: experiment" in report["notes"]


@pytest.mark.parametrize("column, values, found", [
    ("item_id", [1.5] * 30, "double"),
    ("position", ["top"] * 30, "string"),
    ("clicked", ["yes"] * 30, "string"),
    ("request_id", [1.0] * 30, "double"),
    ("ts", ["2026-01-05T10:00:00Z"] * 30, "string"),
])
def test_retyped_columns_exit_2_naming_the_column(tmp_path, column, values, found):
    table = pa.table(logs(30))
    write(tmp_path, table.set_column(table.schema.get_field_index(column), column,
                                     pa.array(values)))
    run = solaris("validate-logs", str(tmp_path))
    assert run.returncode == 2
    assert f"column '{column}' has type {found}, expected" in run.stderr


def test_bad_rows_are_quarantined_by_both_readers(tmp_path, spark):
    data = logs(40)
    users, items, ts = (data["user_id"].to_pylist(), data["item_id"].to_pylist(),
                        data["ts"].to_pylist())
    users[0], users[1] = None, -4
    items[2], items[3] = None, -1
    ts[4] = datetime(2099, 1, 1, tzinfo=UTC)           # from the future
    ts[5] = HOUR - timedelta(microseconds=1)           # the hour before this partition
    ts[6] = HOUR + timedelta(hours=1)                  # the first instant of the next hour
    ts[7] = None
    data.update(user_id=pa.array(users, pa.int64()), item_id=pa.array(items, pa.int64()),
                ts=pa.array(ts, pa.timestamp("us", tz="UTC")))
    write(tmp_path, data)
    expected = {"null_user_id": 1, "negative_user_id": 1, "null_item_id": 1,
                "negative_item_id": 1, "ts_outside_partition": 3, "null_ts": 1}
    arrow = read_window(str(tmp_path), WINDOW)
    assert arrow.reports[0].quarantined == expected
    assert sorted(arrow.table.column("item_id").to_pylist()) == list(range(8, 40))
    frame = read_window_spark(spark, str(tmp_path), WINDOW,
                              quarantine_root=str(tmp_path / "_q_spark"))
    assert sorted(r.item_id for r in frame.collect()) == list(range(8, 40))
    for root in (tmp_path / "_quarantine", tmp_path / "_q_spark"):
        refused = pq.read_table(root / "dt=2026-01-05" / "hour=10" / "part-0.parquet")
        reasons = dict(zip(*np.unique(refused["_reason"].to_pylist(), return_counts=True),
                           strict=True))
        assert {k: int(v) for k, v in reasons.items()} == expected
        assert sorted(refused["_source_row"].to_pylist()) == list(range(8))


def test_duplicates_are_counted_and_the_first_copy_kept(tmp_path):
    data = pa.table(logs(20))
    copies = data.slice(3, 2)  # exact copies of rows 3 and 4
    later = data.slice(5, 1).set_column(4, "position", pa.array([9], pa.int32()))
    write(tmp_path, pa.concat_tables([data, copies, later]))
    read = read_window(str(tmp_path), WINDOW)
    assert read.reports[0].quarantined == {"duplicate_row": 3}
    assert read.table.num_rows == 20
    assert read.table.column("position").to_pylist() == data.column("position").to_pylist()
    refused = pq.read_table(read.reports[0].quarantine_path)
    assert refused["_source_row"].to_pylist() == [20, 21, 22]


def test_a_user_with_200k_rows_is_read_in_bounded_memory(tmp_path, spark):
    n = 200_000
    write(tmp_path, logs(n, users=[42] * n))
    out, err, peak = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "peak"
    # The child reports its own high-water mark (VmHWM of its own address space):
    # ru_maxrss from wait4 would include the forking pytest process's RSS.
    child = ("import sys; from solaris_lib.cli import main; code = main(sys.argv[1:]); "
             "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
             f"open({str(peak)!r}, 'w').write(hwm.split()[1]); sys.exit(code)")
    with out.open("w") as stdout, err.open("w") as stderr:
        status = subprocess.run([sys.executable, "-c", child, "validate-logs", str(tmp_path),
                                 "--json"], stdout=stdout, stderr=stderr).returncode
    assert status == 0, err.read_text()
    report = json.loads(out.read_text().strip().splitlines()[-1])
    assert report["rows_valid"] == n and report["rows_quarantined"] == 0
    assert int(peak.read_text()) < 1024 * 1024  # KiB: under 1 GiB for ~10 MB of logs
    read = read_window(str(tmp_path), WINDOW)
    assert read.table.num_rows == n and set(read.table.column("user_id").to_pylist()) == {42}
    frame = read_window_spark(spark, str(tmp_path), WINDOW)
    assert frame.where("user_id = 42").count() == n


def test_an_item_never_seen_before_is_a_valid_row(tmp_path):
    write(tmp_path, logs(10))
    write(tmp_path, logs(10, first_item=2**62), name="part-1.parquet")
    read = read_window(str(tmp_path), WINDOW)
    assert read.rows_quarantined == 0 and read.table.num_rows == 20
    assert 2**62 + 9 in read.table.column("item_id").to_pylist()


def test_an_empty_file_is_a_valid_empty_partition(tmp_path, spark):
    write(tmp_path, REQUEST_LOG_SCHEMA.empty_table())
    run = solaris("validate-logs", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    assert last_json(run)["rows_read"] == 0 and last_json(run)["files_failed"] == 0
    read = read_window(str(tmp_path), WINDOW)
    assert read.table.num_rows == 0 and read.table.schema == REQUEST_LOG_SCHEMA
    assert read_window_spark(spark, str(tmp_path), WINDOW).count() == 0


def test_the_mine_job_reports_the_rows_its_interval_refused_until_redelivered_clean(tmp_path,
                                                                                     spark):
    """The mine job's report (and metric ``quarantined_rows``) counts the interval's refused
    rows by reason, not those of the earlier hours it mines; a file delivered again without bad
    rows takes its quarantine file away."""
    from solaris_lib.config import load_settings
    from solaris_lib.jobs import mine_logs
    from solaris_lib.orchestration.reporting import metrics_of
    from solaris_lib.speculation.config import MineConfig

    data = logs(40)
    users = data["user_id"].to_pylist()
    users[0], users[1] = None, -4
    bad = dict(data, user_id=pa.array(users, pa.int64()))
    write(tmp_path / "logs", bad)
    write(tmp_path / "logs", logs(20, first_item=100), name="part-1.parquet")
    earlier = tmp_path / "logs" / "dt=2026-01-05" / "hour=09"  # mined, before the interval
    earlier.mkdir(parents=True)
    hour_before = dict(logs(10), ts=pa.array([HOUR - timedelta(minutes=30)] * 10,
                                             pa.timestamp("us", tz="UTC")))
    hour_before["item_id"] = pa.array([None] * 10, pa.int64())
    pq.write_table(pa.table(hour_before), earlier / "part-0.parquet")
    settings = load_settings(data_root=str(tmp_path))
    request = (WINDOW, MineConfig(lookback=timedelta(hours=3)))
    report = mine_logs._run(spark, settings, request)
    assert report["quarantined"] == {"negative_user_id": 1, "null_user_id": 1}
    assert report["quarantined_rows"] == metrics_of("mine", report)["quarantined_rows"] == 2
    quarantine = tmp_path / "logs" / "_quarantine" / "dt=2026-01-05"
    target = quarantine / "hour=10" / "part-0.parquet"
    assert target.exists() and (quarantine / "hour=09" / "part-0.parquet").exists()

    write(tmp_path / "logs", logs(40))  # the same file, corrected by its producer
    report = mine_logs._run(spark, settings, request)
    assert (report["quarantined"], report["quarantined_rows"]) == ({}, 0)
    assert not target.exists()
