"""``solaris simulate`` and ``solaris validate-logs`` as a user runs them."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration


def solaris(*args):
    return subprocess.run([sys.executable, "-m", "solaris_lib.cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_simulate_then_validate(tmp_path):
    out = tmp_path / "logs"
    run = solaris("simulate", "--out", str(out), "--users", "80", "--items", "200", "--days", "1",
                  "--seed", "2", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["rows"] == result["requests"] * 50 > 0
    check = solaris("validate-logs", str(out), "--json")
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout.strip().splitlines()[-1])
    assert report["rows_read"] == result["rows"] and report["rows_quarantined"] == 0


def _one_file(tmp_path):
    out = tmp_path / "logs"
    assert solaris("simulate", "--out", str(out), "--users", "40", "--items", "200", "--days", "1",
                   "--seed", "4").returncode == 0
    files = sorted(out.rglob("part-*.parquet"))
    return out, files


def test_missing_column_exits_2_with_a_specific_message(tmp_path):
    out, files = _one_file(tmp_path)
    pq.write_table(pq.read_table(files[0]).drop_columns(["item_id"]), files[0])
    run = solaris("validate-logs", str(out))
    assert run.returncode == 2
    assert f"{files[0]}: required column(s) missing: item_id" in run.stderr


def test_mistyped_column_exits_2(tmp_path):
    out, files = _one_file(tmp_path)
    table = pq.read_table(files[1])
    table = table.set_column(table.schema.get_field_index("ts"), "ts",
                             table.column("ts").cast("int64"))
    pq.write_table(table, files[1])
    run = solaris("validate-logs", str(out))
    assert run.returncode == 2 and "column 'ts' has type int64" in run.stderr


def test_truncated_file_exits_2_and_other_files_are_still_reported(tmp_path):
    out, files = _one_file(tmp_path)
    files[0].write_bytes(files[0].read_bytes()[:100])
    run = solaris("validate-logs", str(out), "--json")
    assert run.returncode == 2 and "unreadable parquet file" in run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["files"] == len(files) and report["files_failed"] == 1


def test_null_ids_are_counted_and_quarantined_not_fatal(tmp_path):
    out, files = _one_file(tmp_path)
    table = pq.read_table(files[0])
    users = table.column("user_id").to_pylist()
    users[:3] = [None, None, None]
    table = table.set_column(table.schema.get_field_index("user_id"), "user_id",
                             __import__("pyarrow").array(users, "int64"))
    pq.write_table(table, files[0])
    run = solaris("validate-logs", str(out), "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["rows_quarantined"] == 3
    first = next(r for r in report["reports"] if r["path"] == str(files[0]))
    assert first["quarantined"] == {"null_user_id": 3}
    assert pq.read_table(first["quarantine_path"]).num_rows == 3
