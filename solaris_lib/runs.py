"""A job run's report folder, ``<data root>/reports/<job>/interval=KEY/``: the report
(``report.json``) and the run's whole interval (``interval.json``). Partitions are keyed by the
interval's start alone, so a run at a start that a run of another length already used would
replace that run's tables; :func:`refuse_another_length` stops it first, and
:func:`claim_interval` records a run's interval before it writes anything, so the partitions of
a run that failed midway are protected as well (:func:`claimed` withdraws the claim of a run
that failed having written nothing). Used by the job runner
(:mod:`solaris_lib.orchestration.jobrunner`), the DAG's operators (:func:`read_report`) and the
commands that write the same partitions outside the runner (``solaris infer-embeddings``,
``solaris publish-cache``: :func:`recorded_run`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from solaris_lib.config import SolarisSettings
from solaris_lib.errors import ConfigError
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout, join
from solaris_lib.storage import (
    atomic_folder,
    exists,
    is_complete,
    read_text,
    remove_folder,
    replacements,
    write_text,
)

REPORTS = "reports"
REPORT_FILE = "report.json"
INTERVAL_FILE = "interval.json"  # beside the report: the run's whole interval, not just its key
log = logging.getLogger(__name__)


def report_path(settings: SolarisSettings, job_name: str, interval: Interval) -> str:
    """The report folder of ``job_name``'s run of ``interval``."""
    return DataLayout.from_settings(settings).output(REPORTS, interval, job_name)


def write_report(settings: SolarisSettings, job_name: str, interval: Interval, report) -> str:
    """Replace the job's report folder of ``interval`` atomically with ``report`` (a dict, or
    an object with ``as_dict()``) as JSON and the interval; returns the JSON text."""
    payload = report.as_dict() if hasattr(report, "as_dict") else report
    text = json.dumps(payload, default=str)
    with atomic_folder(report_path(settings, job_name, interval)) as staging:
        write_text(join(staging, REPORT_FILE), text)
        write_text(join(staging, INTERVAL_FILE), json.dumps(interval.record()))
    return text


def recorded_run(settings: SolarisSettings, job_name: str, interval: Interval,
                 run: Callable[[], Any]) -> str:
    """``run()`` as a run of the job ``job_name`` for ``interval``, for the commands that write
    its partitions outside the job runner: refused and claimed first as the job would be
    (:func:`claim_interval`), its report recorded after it as the runner records it
    (:func:`write_report`), so that a later run of another length beside it is refused too.
    Returns the report's JSON text."""
    with claimed(settings, job_name, interval):
        report = run()
    return write_report(settings, job_name, interval, report)


def claim_interval(settings: SolarisSettings, job_name: str, interval: Interval) -> bool:
    """Refuse ``interval`` beside another length's partitions (:func:`refuse_another_length`),
    then, when no run of its start is recorded yet, record it before the run writes anything:
    the report folder then holds the interval and no report until :func:`write_report`
    replaces it. A run that fails after writing some partitions leaves the claim, so a run of
    another length is refused beside them too; a rerun of the same interval goes on. Returns
    whether this call made the claim."""
    refuse_another_length(settings, job_name, interval)
    folder = report_path(settings, job_name, interval)
    if is_complete(folder):  # recorded by an earlier run (or from before intervals were)
        return False
    with atomic_folder(folder) as staging:
        write_text(join(staging, INTERVAL_FILE), json.dumps(interval.record()))
    return True


@contextmanager
def claimed(settings: SolarisSettings, job_name: str, interval: Interval) -> Iterator[None]:
    """The body as a run of ``interval``, claimed first (:func:`claim_interval`). When the body
    raises before this process began to replace or remove any output (a partition folder, the
    served cache version: ``storage.replacements``), the claim this call made is withdrawn: a
    run that failed having changed nothing (a missing input, a bad model) does not refuse a
    run of another length at its start. A claim of an earlier run (of the same interval), or of
    a run that changed something, stays; so does the claim of a killed process."""
    made = claim_interval(settings, job_name, interval)
    before = replacements()
    try:
        yield
    except BaseException:
        if made and replacements() == before:
            _withdraw(report_path(settings, job_name, interval))
        raise


def _withdraw(folder: str) -> None:
    """Remove a claim folder that still holds no report; a failure is logged, never hides the
    run's own error."""
    try:
        if not exists(join(folder, REPORT_FILE)):
            remove_folder(folder)
    except Exception as exc:  # noqa: BLE001 - the run's own error is the one to raise
        log.warning("could not withdraw the claim %s: %s", folder, exc)


def read_report(settings: SolarisSettings, job_name: str, interval: Interval) -> dict | None:
    """The report :func:`write_report` left for ``interval``, or None when there is none."""
    folder = report_path(settings, job_name, interval)
    if not is_complete(folder) or not exists(join(folder, REPORT_FILE)):
        return None  # none, or only a claim (:func:`claim_interval`): the run did not finish
    return json.loads(read_text(join(folder, REPORT_FILE)))


def earlier_report(settings: SolarisSettings, job_name: str, interval: Interval) -> dict | None:
    """The report of ``job_name``'s run of exactly ``interval``, for a later run to compare
    with; None (logged) when there is none, it cannot be read, or its folder records another
    interval (a run of another length at the same start). Never raises for what it finds."""
    folder = report_path(settings, job_name, interval)
    try:
        report = read_report(settings, job_name, interval)
        if report is not None and _recorded_interval(folder) not in (None, interval):
            log.warning("%s: the report under %s is not of %s: not compared", job_name,
                        folder, interval)
            return None
    except (OSError, ValueError, ConfigError) as exc:
        log.warning("%s: the report under %s cannot be read (%s): not compared", job_name,
                    folder, exc)
        return None
    return report if isinstance(report, dict) else None


def _recorded_interval(folder: str) -> Interval | None:
    """The interval a report folder records; None for a folder written before intervals were
    recorded. ValueError / ConfigError when the file is not an interval record."""
    recorded = join(folder, INTERVAL_FILE)
    return Interval.from_record(json.loads(read_text(recorded))) if exists(recorded) else None


def refuse_another_length(settings: SolarisSettings, job_name: str, interval: Interval) -> None:
    """Raise :class:`ConfigError` when an earlier run of ``job_name`` wrote its partitions for
    an interval with ``interval``'s start and another end (a manual daily run beside the hourly
    schedule, a backfill of another length). A rerun of the same interval, and a partition
    written before its report recorded the interval, pass."""
    folder = report_path(settings, job_name, interval)
    if not is_complete(folder):
        return
    try:
        earlier = _recorded_interval(folder)
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"{join(folder, INTERVAL_FILE)} is not an interval as job reports "
                          f"record it ({exc}): delete its folder to run this interval") from exc
    if earlier is not None and earlier != interval:
        finished = ("its report" if exists(join(folder, REPORT_FILE))
                    else "a run that did not finish: some may be written; its claim")
        raise ConfigError(
            f"{job_name}: the partitions keyed {interval.key} hold the interval "
            f"{earlier} ({finished} under {folder}); this run is "
            f"{interval}. Partitions are keyed by the interval's start, so runs of different "
            "lengths cannot share a start: run the interval the partitions were written for, "
            "or write to another SOLARIS_DATA_ROOT; to replace them, delete this report folder "
            "of each job of the run (docs/operations.md)")
