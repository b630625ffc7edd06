"""run_job's exit codes: a job's bad flag is a ConfigError (2), and an executor's failure that
is a log-contract error comes out as that error (2, naming the file), not as Spark's (1).
Real Spark raises the executor error in tests/integration/reliability/test_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from solaris_lib.jobs import mine_logs
from solaris_lib.orchestration.jobrunner import Job, run_job

INTERVAL = ["--start", "2026-01-05T10:00", "--end", "2026-01-05T11:00"]
EXECUTOR_TEXT = ("An exception was thrown from the Python worker:\nTraceback ...\n"
                 "solaris_lib.errors.LogContractError: /d/dt=2026-01-05/hour=10/p.parquet: "
                 "unreadable parquet file (Corrupt snappy compressed data.)\n\tat org.apache...")


@pytest.fixture(autouse=True)
def data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLARIS_DATA_ROOT", str(tmp_path))


def test_a_bad_job_flag_is_a_config_error(caplog):
    job = Job("mine", "A job.", mine_logs._prepare, lambda spark, settings, request: {},
              mine_logs._arguments, spark=False)  # the mine job's flags, without a JVM
    assert run_job(job, [*INTERVAL, "--max-history", "0"]) == 2
    assert "invalid mine settings (max_history" in caplog.text
    daily = ["--start", "2026-01-05T10:00", "--end", "2026-01-06T10:00"]
    assert run_job(job, daily) == 0  # the refused run claimed nothing


def test_a_run_that_failed_midway_still_protects_its_partitions(caplog, tmp_path):
    """The interval is recorded before the run writes anything: beside a run that failed
    after writing some of its partitions, a run of another length is refused too, also after a
    rerun that failed before writing; the rerun of the same interval goes on and records its
    report."""
    from solaris_lib.config import load_settings
    from solaris_lib.errors import OutputWriteError
    from solaris_lib.intervals import Interval
    from solaris_lib.runs import read_report
    from solaris_lib.storage import atomic_folder

    runs = []

    def run(spark, settings, request):
        runs.append(1)
        if len(runs) == 1:
            with atomic_folder(str(tmp_path / "mined" / "first" / "interval=20260105T100000Z")):
                pass
            raise OutputWriteError("no space left on device after the first partition")
        if len(runs) == 2:  # a rerun that fails before writing keeps the first run's claim
            raise OutputWriteError("no space left on device before any partition")
        return {"rows": 3}

    job = Job("mine", "A job.", lambda args, settings: None, run, spark=False)
    daily = ["--start", "2026-01-05T10:00", "--end", "2026-01-06T10:00"]
    hour = Interval.parse(INTERVAL[1], INTERVAL[3])
    assert run_job(job, INTERVAL) == 7
    assert read_report(load_settings(), "mine", hour) is None  # claimed, not reported
    assert run_job(job, daily) == 2 and len(runs) == 1
    assert "(a run that did not finish: some may be written" in caplog.text
    assert run_job(job, INTERVAL) == 7 and run_job(job, daily) == 2 and len(runs) == 2
    assert run_job(job, INTERVAL) == 0 and len(runs) == 3
    assert read_report(load_settings(), "mine", hour) == {"rows": 3}
    caplog.clear()
    assert run_job(job, daily) == 2 and "(its report under" in caplog.text


def test_a_run_that_failed_before_writing_anything_leaves_no_claim(caplog, tmp_path):
    """A run that fails before it replaces any folder (here: a missing input, exit 3) withdraws
    its claim, so a run of another length at that start goes on; an earlier run's claim is never
    withdrawn by a later run's failure."""
    from solaris_lib.errors import EmptyInputError

    runs = []

    def run(spark, settings, request):
        runs.append(1)
        if len(runs) in (1, 3):
            raise EmptyInputError("the logs of the interval are missing: run its job first")
        return {"rows": 3}

    job = Job("mine", "A job.", lambda args, settings: None, run, spark=False)
    daily = ["--start", "2026-01-05T10:00", "--end", "2026-01-06T10:00"]
    claims = tmp_path / "reports" / "mine"
    assert run_job(job, INTERVAL) == 3  # EmptyInputError's exit code
    assert not claims.exists() or list(claims.iterdir()) == []  # withdrawn
    assert run_job(job, daily) == 0 and len(runs) == 2  # the other length is not refused
    assert run_job(job, daily) == 3 and len(runs) == 3  # a failed rerun: the claim stays
    assert run_job(job, INTERVAL) == 2 and len(runs) == 3
    assert "hold the interval [2026-01-05T10:00:00+00:00, 2026-01-06T10:00:00+00:00)" in \
        caplog.text


def test_an_executor_log_contract_error_keeps_its_exit_code(caplog, capsys):
    def run(spark, settings, request):
        raise PySparkException(message=EXECUTOR_TEXT)

    job = Job("fails-in-an-executor", "A job.", lambda args, settings: None, run, spark=False)
    assert run_job(job, INTERVAL) == 2
    assert "/d/dt=2026-01-05/hour=10/p.parquet: unreadable parquet file" in caplog.text
    assert capsys.readouterr().out == ""


def test_a_run_of_another_length_beside_a_partition_of_that_start_is_refused(caplog, tmp_path):
    """Partitions are keyed by the interval's start: a daily run starting at 10:00 would
    replace the hourly run's tables; reruns of the same interval, and a job that writes no
    partitions, go on."""
    runs = []
    job = Job("mine", "A job.", lambda args, settings: None,
              lambda spark, settings, request: runs.append(1) or {"rows": len(runs)}, spark=False)
    daily = ["--start", "2026-01-05T10:00", "--end", "2026-01-06T10:00"]
    assert run_job(job, INTERVAL) == 0 and run_job(job, INTERVAL) == 0  # a rerun
    assert run_job(job, daily) == 2 and len(runs) == 2
    assert "hold the interval [2026-01-05T10:00:00+00:00, 2026-01-05T11:00:00+00:00)" in caplog.text
    recorded = tmp_path / "reports" / "mine" / "interval=20260105T100000Z" / "interval.json"
    recorded.write_text("{")  # damaged by hand: named, not a traceback
    assert run_job(job, INTERVAL) == 2 and "is not an interval as job reports" in caplog.text
    unkeyed = Job("train-foundation", "A job.", job.prepare, job.run, spark=False, keyed=False)
    assert run_job(unkeyed, INTERVAL) == 0 and run_job(unkeyed, daily) == 0
    assert len(runs) == 4


@pytest.mark.parametrize("command,job_name", [("infer-embeddings", "infer-embeddings"),
                                              ("publish-cache", "publish-cache")])
def test_the_commands_that_write_a_jobs_partitions_refuse_as_the_job_does(command, job_name,
                                                                          capsys):
    """``solaris infer-embeddings`` and ``solaris publish-cache`` write the partitions of the
    jobs of those names: beside that job's hourly run, a daily run is refused before Spark."""
    from solaris_lib.cli import main

    job = Job(job_name, "A job.", lambda args, settings: None,
              lambda spark, settings, request: {}, spark=False)
    assert run_job(job, INTERVAL) == 0
    assert main([command, "--start", "2026-01-05T10:00", "--end", "2026-01-06T10:00"]) == 2
    assert f"{job_name}: the partitions keyed 20260105T100000Z hold the interval" in \
        capsys.readouterr().err


@pytest.mark.parametrize("command,job_name,work", [
    ("infer-embeddings", "infer-embeddings", "solaris_lib.model.fallback.embed_interval"),
    ("publish-cache", "publish-cache", "solaris_lib.cache.publish.publish")])
def test_the_commands_record_their_interval_as_the_job_does(command, job_name, work, tmp_path,
                                                            monkeypatch, capsys, caplog):
    """A daily run through the command that failed before writing anything leaves no claim, as
    the job runner's would not; after one that succeeded, the job's hourly run of the same start
    is refused: the command recorded its run as the job runner records one. (The commands'
    Spark work is replaced here; tests/integration runs it for real.)"""
    import contextlib
    import json

    from solaris_lib.cli import main
    from solaris_lib.errors import EmptyInputError

    def fails(*args):
        raise EmptyInputError("its input partition is missing: run its job first")

    monkeypatch.setattr("solaris_lib.sparkutil.spark_session",
                        lambda *args, **kwargs: contextlib.nullcontext())
    monkeypatch.setattr("solaris_lib.sparkutil.get_spark", lambda *args, **kwargs: None)
    daily = [command, "--start", "2026-01-05T10:00", "--end", "2026-01-06T10:00"]
    monkeypatch.setattr(work, fails)
    assert main(daily) == 3
    assert list((tmp_path / "reports").glob(f"{job_name}/*")) == []  # withdrawn
    monkeypatch.setattr(work, lambda *args: {"rows": 7})
    assert main(daily) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"rows": 7}
    job = Job(job_name, "A job.", lambda args, settings: None,
              lambda spark, settings, request: {}, spark=False)
    assert run_job(job, INTERVAL) == 2
    assert f"{job_name}: the partitions keyed 20260105T100000Z hold the interval " \
        "[2026-01-05T10:00:00+00:00, 2026-01-06T10:00:00+00:00)" in caplog.text


def test_an_earlier_report_is_compared_only_when_it_is_of_that_very_interval(caplog, tmp_path):
    """A later run compares with the report of the interval before it (the speculate job's
    misses): a report of another length at that start, or one that cannot be read, is left
    out with a warning and never fails the later run."""
    from solaris_lib.config import SolarisSettings
    from solaris_lib.intervals import Interval
    from solaris_lib.runs import earlier_report, report_path, write_report

    settings = SolarisSettings(data_root=str(tmp_path))
    hour = Interval.parse("2026-01-05T10:00", "2026-01-05T11:00")
    day = Interval.parse("2026-01-05T10:00", "2026-01-06T10:00")
    assert earlier_report(settings, "speculate", hour) is None  # none yet
    write_report(settings, "speculate", hour, {"misses": {"pairs": 3}})
    assert earlier_report(settings, "speculate", hour) == {"misses": {"pairs": 3}}
    assert earlier_report(settings, "speculate", day) is None
    assert "is not of [2026-01-05T10:00:00+00:00, 2026-01-06T10:00:00+00:00)" in caplog.text
    (Path(report_path(settings, "speculate", hour)) / "report.json").write_text("{")
    assert earlier_report(settings, "speculate", hour) is None
    assert "cannot be read" in caplog.text


def test_an_interrupted_run_withdraws_its_claim_and_a_failed_withdrawal_hides_nothing(
        tmp_path, caplog, monkeypatch):
    """An interrupt (Ctrl-C, Airflow's SystemExit) before anything was written withdraws the
    claim and is raised as it was; a withdrawal that fails is logged, and the run's own error
    keeps its exit code."""
    from solaris_lib.config import load_settings
    from solaris_lib.errors import EmptyInputError
    from solaris_lib.intervals import Interval
    from solaris_lib.runs import claimed

    hour = Interval.parse(INTERVAL[1], INTERVAL[3])
    claims = tmp_path / "reports" / "mine"
    with pytest.raises(KeyboardInterrupt):
        with claimed(load_settings(), "mine", hour):
            assert list(claims.iterdir())  # claimed while the body runs
            raise KeyboardInterrupt
    assert list(claims.iterdir()) == []

    def fails(spark, settings, request):
        raise EmptyInputError("the logs of the interval are missing: run its job first")

    def broken(folder):
        raise ValueError("the filesystem refused the delete")

    monkeypatch.setattr("solaris_lib.runs.remove_folder", broken)
    job = Job("mine", "A job.", lambda args, settings: None, fails, spark=False)
    assert run_job(job, INTERVAL) == 3
    assert "could not withdraw the claim" in caplog.text
    assert "the logs of the interval are missing" in caplog.text
