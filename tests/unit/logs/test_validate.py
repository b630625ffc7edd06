"""Validation of request-log files: column-level errors and row-level quarantine."""

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.errors import LogContractError
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA
from solaris_lib.logs.validate import validate_dir, validate_file

HOUR = datetime(2026, 1, 5, 10, tzinfo=UTC)


def rows(n, start=0, **overrides):
    data = {
        "request_id": [f"r{i // 5}" for i in range(start, start + n)],
        "ts": [HOUR + timedelta(seconds=i) for i in range(start, start + n)],
        "user_id": [7] * n,
        "item_id": list(range(start, start + n)),
        "position": [i % 5 for i in range(start, start + n)],
        "clicked": [i % 7 == 0 for i in range(start, start + n)],
    }
    data.update(overrides)
    return data


def write(root, data, schema=None, name="part-0.parquet"):
    folder = root / "dt=2026-01-05" / "hour=10"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(pa.table(data, schema=schema), path)
    return path


def test_clean_file_passes_with_exact_schema(tmp_path):
    path = write(tmp_path, rows(20), REQUEST_LOG_SCHEMA)
    clean, report = validate_file(str(path), str(tmp_path), str(tmp_path / "_q"))
    assert report.rows_read == 20 and report.rows_valid == 20 and report.quarantined == {}
    assert clean.schema == REQUEST_LOG_SCHEMA
    assert not (tmp_path / "_q").exists()


def test_bad_rows_are_quarantined_with_reasons(tmp_path):
    data = rows(10)
    data["user_id"] = [None, 7, -3, 7, 7, 7, 7, 7, 7, 7]
    data["item_id"] = [1, None, 2, -9, 4, 5, 6, 5, 8, 9]  # row 7 repeats row 5's (r1, 5)
    data["request_id"] = ["r0", "r0", "r0", "r0", "r0", "r1", "r1", "r1", "r1", "r1"]
    data["ts"][4] = HOUR + timedelta(hours=2)  # outside its hour partition
    data["position"][6] = -1
    path = write(tmp_path, data)
    clean, report = validate_file(str(path), str(tmp_path), str(tmp_path / "_q"))
    assert report.quarantined == {
        "null_user_id": 1,
        "null_item_id": 1,
        "negative_user_id": 1,
        "negative_item_id": 1,
        "ts_outside_partition": 1,
        "bad_position": 1,
        "duplicate_row": 1,
    }
    assert clean.num_rows == 3 and report.rows_valid == 3
    quarantined = pq.read_table(report.quarantine_path)
    assert quarantined.num_rows == 7
    assert sorted(quarantined.column("_source_row").to_pylist()) == [0, 1, 2, 3, 4, 6, 7]
    assert set(quarantined.column("_reason").to_pylist()) == set(report.quarantined)


def test_missing_required_column_is_a_file_error(tmp_path):
    data = rows(5)
    del data["user_id"]
    path = write(tmp_path, data)
    with pytest.raises(LogContractError, match="required column\\(s\\) missing: user_id"):
        validate_file(str(path), str(tmp_path), None)


def test_mistyped_column_is_a_file_error(tmp_path):
    data = rows(5, user_id=["7"] * 5)
    path = write(tmp_path, data)
    with pytest.raises(LogContractError, match="'user_id' has type string, expected int64"):
        validate_file(str(path), str(tmp_path), None)


def test_truncated_file_is_unreadable(tmp_path):
    path = write(tmp_path, rows(50))
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    with pytest.raises(LogContractError, match="unreadable parquet file"):
        validate_file(str(path), str(tmp_path), None)


def test_safe_widenings_and_absent_optional_columns(tmp_path):
    data = rows(6)
    del data["position"], data["clicked"]
    schema = pa.schema([("request_id", pa.string()), ("ts", pa.timestamp("ns")),
                        ("user_id", pa.int32()), ("item_id", pa.uint32()),
                        ("extra", pa.string())])
    data["extra"] = ["x"] * 6
    path = write(tmp_path, data, schema)
    clean, report = validate_file(str(path), str(tmp_path), None)
    assert clean.schema == REQUEST_LOG_SCHEMA
    assert clean.column("position").null_count == 6
    assert clean.column("ts")[0].as_py() == HOUR
    assert any("extra" in note for note in report.notes)
    assert any("'clicked' absent" in note for note in report.notes)


def test_integer_clicks_must_be_zero_or_one(tmp_path):
    path = write(tmp_path, rows(4, clicked=[0, 1, 2, None]))
    clean, report = validate_file(str(path), str(tmp_path), None)
    assert report.quarantined == {"bad_clicked": 1}
    assert clean.column("clicked").to_pylist() == [False, True, None]


def test_uint64_ids_beyond_int64_are_quarantined(tmp_path):
    ids = pa.array([1, 2**63 + 5, 3], pa.uint64())
    path = write(tmp_path, {**rows(3), "item_id": ids})
    clean, report = validate_file(str(path), str(tmp_path), None)
    assert report.quarantined == {"id_out_of_range": 1}
    assert clean.column("item_id").to_pylist() == [1, 3]


def test_validate_dir_reports_every_file_and_keeps_going(tmp_path):
    write(tmp_path, rows(5), name="a.parquet")
    broken = write(tmp_path, rows(5), name="b.parquet")
    broken.write_bytes(b"not parquet at all")
    reports = validate_dir(str(tmp_path))
    assert [r.error is None for r in reports] == [True, False]
    assert reports[0].rows_read == 5


def test_rows_delivered_twice_in_two_files_of_an_hour_are_kept_once(tmp_path):
    from solaris_lib.intervals import Interval
    from solaris_lib.logs.reader import read_window

    first = rows(10)  # (r0, 0) .. (r1, 9)
    again = rows(6, start=6)  # (r1, 6) .. (r2, 11): rows 6-9 repeat the first file's
    write(tmp_path, first, REQUEST_LOG_SCHEMA, name="part-0.parquet")
    write(tmp_path, again, REQUEST_LOG_SCHEMA, name="part-1.parquet")
    read = read_window(str(tmp_path), Interval(HOUR, HOUR + timedelta(hours=1)),
                       quarantine_root=str(tmp_path / "_q"))
    keys = list(zip(read.table["request_id"].to_pylist(), read.table["item_id"].to_pylist(),
                    strict=True))
    expected = sorted({(f"r{i // 5}", i) for i in range(12)})
    assert sorted(keys) == expected and len(keys) == len(expected)
    assert [r.quarantined for r in read.reports] == [{}, {"duplicate_row": 4}]
    quarantined = pq.read_table(tmp_path / "_q" / "dt=2026-01-05" / "hour=10" / "part-1.parquet")
    assert quarantined["item_id"].to_pylist() == [6, 7, 8, 9]
    assert set(quarantined["_reason"].to_pylist()) == {"duplicate_row"}
    reports = validate_dir(str(tmp_path), str(tmp_path / "_q2"))
    assert [r.quarantined for r in reports] == [{}, {"duplicate_row": 4}]


def test_rows_repeated_across_files_are_duplicates_beside_a_broken_file(tmp_path):
    """An hour holding an unreadable file: the other files are still validated together, so
    a row delivered in two of them is quarantined once as ``duplicate_row`` (validated one by
    one, the repeat passed as valid, and its earlier quarantine file was removed)."""
    write(tmp_path, rows(10), REQUEST_LOG_SCHEMA, name="part-0.parquet")
    write(tmp_path, rows(6, start=6), REQUEST_LOG_SCHEMA, name="part-1.parquet")
    write(tmp_path, rows(3, start=20), REQUEST_LOG_SCHEMA, name="part-2.parquet")
    broken = next(tmp_path.rglob("part-2.parquet"))
    broken.write_bytes(broken.read_bytes()[:100])
    reports = validate_dir(str(tmp_path))
    assert [r.path.rsplit("/", 1)[1] for r in reports] == [
        "part-0.parquet", "part-1.parquet", "part-2.parquet"]
    clean, repeats, failed = reports
    assert clean.quarantined == {} and clean.rows_valid == 10
    assert repeats.quarantined == {"duplicate_row": 4} and repeats.rows_valid == 2
    assert pq.read_table(repeats.quarantine_path).num_rows == 4
    assert failed.error and "unreadable parquet file" in failed.error
