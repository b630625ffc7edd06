"""Read the request logs of one time window, validated, with pyarrow or with Spark.

Both readers run the same validation (:mod:`solaris_lib.logs.validate`): the Spark reader ships
the file list to executors, which read and check their files with pyarrow (``mapInArrow``), so
there is one implementation of the contract. Refused rows go to the quarantine folder; a file
that breaks the contract as a whole fails the read with :class:`LogContractError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from solaris_lib.errors import LogContractError, OutputWriteError
from solaris_lib.intervals import Interval
from solaris_lib.layout import QUARANTINE_DIRNAME, join
from solaris_lib.logs.conform import check_columns
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, WITH_EVAL_SCHEMA, hour_partition
from solaris_lib.logs.validate import FileReport, quarantined_rows, validate_files
from solaris_lib.storage import filesystem, list_files

log = logging.getLogger(__name__)
_EXECUTOR_ERROR = re.compile(
    r"solaris_lib\.errors\.(?P<kind>LogContractError|OutputWriteError): (?P<message>[^\n]+)")


@dataclass
class WindowRead:
    """Clean rows of a window and the per-file validation reports."""

    table: pa.Table
    reports: list[FileReport] = field(default_factory=list)

    @property
    def rows_quarantined(self) -> int:
        return sum(r.rows_quarantined for r in self.reports)


def window_files(logs_root: str, interval: Interval) -> list[str]:
    """Parquet files of every hour partition overlapping ``interval``, in time order."""
    files = []
    for hour in interval.hours():
        files.extend(list_files(join(logs_root, hour_partition(hour))))
    return files


def quarantined_in(logs_root: str, interval: Interval, quarantine_root: str) -> dict[str, int]:
    """{reason: rows} the last validation of each log file of ``interval``'s hours refused
    (from their quarantine files under ``quarantine_root``; empty: none)."""
    return quarantined_rows(window_files(logs_root, interval), logs_root, quarantine_root)


def _in_window(table: pa.Table, start: datetime, end: datetime) -> pa.Table:
    ts = table.column("ts")
    keep = pc.and_(
        pc.greater_equal(ts, pa.scalar(start, ts.type)), pc.less(ts, pa.scalar(end, ts.type))
    )
    return table.filter(keep)


def read_window(
    logs_root: str,
    interval: Interval,
    *,
    with_eval: bool = False,
    quarantine_root: str | None = None,
) -> WindowRead:
    """Read and validate the rows of ``[interval.start, interval.end)`` into one table.

    ``with_eval`` keeps the simulator's ``p_click`` column: evaluation code only.
    An empty window gives an empty table in the contract schema.
    """
    quarantine_root = quarantine_root or join(logs_root, QUARANTINE_DIRNAME)
    tables, reports = [], []
    for clean, report in validate_files(window_files(logs_root, interval), logs_root,
                                        quarantine_root, with_eval=with_eval):
        tables.append(_in_window(clean, interval.start, interval.end))
        reports.append(report)
    schema = WITH_EVAL_SCHEMA if with_eval else REQUEST_LOG_SCHEMA
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    log.info("read %d rows from %d files in %s", table.num_rows, len(reports), interval)
    return WindowRead(table=table, reports=reports)


def check_window_schemas(files: list[str]) -> None:
    """Check every file's footer against the contract before a distributed read starts."""
    for path in files:
        fs, inner = filesystem(path)
        try:
            schema = pq.read_schema(inner, filesystem=fs)
        except (pa.ArrowException, OSError) as exc:
            raise LogContractError(path, f"unreadable parquet file ({exc})") from exc
        check_columns(schema, path)


def read_window_spark(
    spark,
    logs_root: str,
    interval: Interval,
    *,
    with_eval: bool = False,
    quarantine_root: str | None = None,
):
    """The validated rows of ``interval`` as a Spark DataFrame in the contract schema.

    Files are listed and their footers checked on the driver; executors read, validate and
    quarantine them with the same code as :func:`read_window`. Run actions on the frame inside
    :func:`contract_errors_from_executors` to get a corrupt file's LogContractError as such.
    """
    from solaris_lib.logs.schema import spark_schema

    files = window_files(logs_root, interval)
    schema = spark_schema(with_eval)
    if not files:
        log.warning("no log files in %s under %s", interval, logs_root)
        return spark.createDataFrame([], schema)
    check_window_schemas(files)
    reader = _ExecutorReader(
        logs_root, quarantine_root or join(logs_root, QUARANTINE_DIRNAME), interval, with_eval
    )
    hours: dict[str, list[str]] = {}
    for path in files:  # one row per hour partition: its files are validated together
        hours.setdefault(path.rsplit("/", 1)[0], []).append(path)
    slices = max(1, min(len(hours), spark.sparkContext.defaultParallelism * 2))
    rows = [("\n".join(paths),) for paths in hours.values()]
    return (spark.createDataFrame(rows, "paths string").repartition(slices, "paths")
            .mapInArrow(reader, schema))


@dataclass(frozen=True)
class _ExecutorReader:
    """Picklable ``mapInArrow`` function: read, validate and window the files of each hour
    named in a batch (one row per hour: its paths joined by newlines)."""

    logs_root: str
    quarantine_root: str
    interval: Interval
    with_eval: bool

    def __call__(self, batches):
        for batch in batches:
            for paths in batch.column(0).to_pylist():
                for clean, _ in validate_files(paths.split("\n"), self.logs_root,
                                               self.quarantine_root, with_eval=self.with_eval):
                    yield from _in_window(clean, self.interval.start,
                                          self.interval.end).to_batches()


def executor_contract_error(text: str) -> LogContractError | OutputWriteError | None:
    """The :class:`LogContractError` (or, when quarantining hit a full disk, the
    :class:`OutputWriteError`) an executor raised, parsed from a Spark error's text."""
    match = _EXECUTOR_ERROR.search(text)
    if match is None:
        return None
    if match.group("kind") == "OutputWriteError":
        return OutputWriteError(match.group("message").strip())
    path, _, problem = match.group("message").partition(": ")
    return LogContractError(path, problem.strip())


@contextmanager
def contract_errors_from_executors() -> Iterator[None]:
    """Around Spark actions on :func:`read_window_spark` frames: a file that breaks the
    contract only when its pages are read (corrupt data past a valid footer) fails inside an
    executor; re-raise it as the :class:`LogContractError` it is (exit code 2). A full disk
    while an executor quarantines rows is re-raised as :class:`OutputWriteError` (exit 7)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JJavaError) as exc:
        error = executor_contract_error(str(exc))
        if error is None:
            raise
        raise error from exc
