"""Which retrieval partition a run reads: the newest fitted on logs up to the run's end, so a
run, its rerun and a backfill read the same vectors and none saw the logs it predicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from solaris_lib.intervals import Interval
from solaris_lib.speculation.io import newest_trained_by, trained_until, write_trained_until

DAY = datetime(2026, 1, 5, tzinfo=UTC)


def partition(root, start: datetime, end: datetime | None, complete: bool = True) -> None:
    folder = root / f"interval={Interval(start, start + timedelta(days=1)).key}"
    folder.mkdir(parents=True)
    if complete:
        (folder / "_SUCCESS").touch()
    if end is not None:
        write_trained_until(str(folder), end)


def test_a_daily_partition_is_read_only_once_its_day_has_ended(tmp_path):
    partition(tmp_path, DAY - timedelta(days=1), DAY)
    partition(tmp_path, DAY, DAY + timedelta(days=1))  # fitted on the whole of day D
    hour = Interval(DAY + timedelta(hours=5), DAY + timedelta(hours=6))
    assert newest_trained_by(str(tmp_path), hour.end) == "20260104T000000Z"
    assert newest_trained_by(str(tmp_path), hour.previous().end) == "20260104T000000Z"
    assert newest_trained_by(str(tmp_path), DAY + timedelta(days=1)) == "20260105T000000Z"
    assert newest_trained_by(str(tmp_path), DAY) == "20260104T000000Z"
    assert newest_trained_by(str(tmp_path), DAY - timedelta(hours=1)) is None


def test_incomplete_and_unmarked_partitions(tmp_path):
    partition(tmp_path, DAY - timedelta(days=2), None)  # written before the marker: one day
    partition(tmp_path, DAY - timedelta(days=1), DAY, complete=False)
    assert trained_until(str(tmp_path), "20260103T000000Z") == DAY - timedelta(days=1)
    assert newest_trained_by(str(tmp_path), DAY + timedelta(hours=1)) == "20260103T000000Z"


def test_the_runs_of_an_interval_read_the_partitions_its_speculate_run_read(tmp_path, caplog):
    """The hour ending at midnight starts with the daily retrieval run of the day it ends: its
    speculate run may read the day before's vectors, and a rerun, or its inference, must read
    those too, not the newer ones completed meanwhile; a record of another interval with the
    same start, or one naming partitions gone or refitted on later logs, is not followed."""
    from solaris_lib.layout import RETRIEVAL, SPECULATED, DataLayout
    from solaris_lib.speculation.io import RETRIEVAL_USED, retrieval_record
    from solaris_lib.speculation.pipeline import retrieval_keys

    layout = DataLayout(root=str(tmp_path), models_root=str(tmp_path / "models"))
    root = tmp_path / RETRIEVAL
    partition(root, DAY - timedelta(days=1), DAY)
    hour = Interval(DAY - timedelta(hours=1), DAY)
    day_before, day = "20260103T000000Z", "20260104T000000Z"
    assert retrieval_keys(layout, hour) == (day, None)  # nothing speculated yet: the newest
    speculated = tmp_path / SPECULATED / f"interval={hour.key}"
    speculated.mkdir(parents=True)
    (speculated / "_SUCCESS").touch()
    marker = speculated / RETRIEVAL_USED
    marker.write_text(retrieval_record(hour, day_before, day_before))
    partition(root, DAY - timedelta(days=2), DAY - timedelta(days=1))
    assert retrieval_keys(layout, hour) == (day_before, day_before)  # what the run read
    marker.write_text(retrieval_record(hour, None, None))
    assert retrieval_keys(layout, hour) == (None, None)  # it read none: a rerun reads none
    daily = Interval(hour.start, hour.start + timedelta(days=1))
    marker.write_text(retrieval_record(daily, day, day))
    assert retrieval_keys(layout, hour) == (day, day_before)  # another run's record: newest
    marker.write_text(retrieval_record(hour, day, day))
    assert retrieval_keys(layout, hour) == (day, day_before)  # day saw the previous' labels
    assert "(previous), is gone or no longer fitted" in caplog.text
    for damaged in ('{"start": "x", "end": "y", "current": null, "previous": null}',
                    '{"start": null, "end": 3, "current": 1, "previous": null}', "[1]", "{"):
        caplog.clear()
        marker.write_text(damaged)  # never a crash: named and not followed
        assert retrieval_keys(layout, hour) == (day, day_before)
        assert "is not a retrieval record" in caplog.text
    marker.write_text(retrieval_record(hour, None, day_before))  # not a run's
    assert retrieval_keys(layout, hour) == (day, day_before)
    marker.write_text(retrieval_record(hour, day_before, day_before))
    (root / f"interval={day_before}" / "_SUCCESS").unlink()  # retention removed it
    caplog.clear()
    assert retrieval_keys(layout, hour) == (day, None)
    assert "(current), is gone" in caplog.text and "(previous), is gone" in caplog.text
    partition(root, DAY - timedelta(days=3), DAY - timedelta(days=2))
    marker.write_text(retrieval_record(hour, day, "20260102T000000Z"))
    assert retrieval_keys(layout, hour) == (day, "20260102T000000Z")  # each key on its own
    marker.write_text(retrieval_record(hour, day, day_before))
    assert retrieval_keys(layout, hour) == (day, "20260102T000000Z")
