"""Validate request-log files: per-file reports, quarantined rows, and clean contract tables."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from solaris_lib.errors import LogContractError, OutputWriteError
from solaris_lib.layout import QUARANTINE_DIRNAME, join
from solaris_lib.logs.conform import check_columns, conform
from solaris_lib.logs.rows import REASONS, row_reasons
from solaris_lib.logs.schema import parse_hour_partition
from solaris_lib.storage import filesystem, is_disk_full, list_files

log = logging.getLogger(__name__)


@dataclass
class FileReport:
    """What validation found in one file."""

    path: str
    rows_read: int = 0
    rows_valid: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    quarantine_path: str | None = None

    @property
    def rows_quarantined(self) -> int:
        return sum(self.quarantined.values())

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "rows_read": self.rows_read,
            "rows_valid": self.rows_valid,
            "rows_quarantined": self.rows_quarantined,
            "quarantined": dict(self.quarantined),
            "notes": list(self.notes),
            "error": self.error,
            "quarantine_path": self.quarantine_path,
        }


def read_raw(path: str) -> pa.Table:
    """Read one parquet file, turning any read failure into a :class:`LogContractError`."""
    fs, inner = filesystem(path)
    try:
        return pq.read_table(inner, filesystem=fs)
    except (pa.ArrowException, OSError) as exc:
        raise LogContractError(path, f"unreadable parquet file ({exc})") from exc


def _quarantine_target(path: str, root: str, quarantine_root: str) -> str:
    relative = path[len(root.rstrip("/")) + 1 :] if path.startswith(root) else path.rsplit("/", 1)[-1]
    return join(quarantine_root, relative)


def write_quarantine(raw: pa.Table, reasons: np.ndarray, source: str, target: str) -> None:
    """Write the refused rows of ``raw`` (as read, untouched) with their reason and source."""
    bad = np.flatnonzero(reasons >= 0)
    rows = raw.take(pa.array(bad))
    rows = rows.append_column("_reason", pa.array([REASONS[i] for i in reasons[bad]]))
    rows = rows.append_column("_source_file", pa.array([source] * len(bad)))
    rows = rows.append_column("_source_row", pa.array(bad, pa.int64()))
    fs, inner = filesystem(target)
    folder, name = inner.rsplit("/", 1)
    fs.create_dir(folder, recursive=True)
    staging = f"{folder}/.{name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        pq.write_table(rows, staging, filesystem=fs)
        fs.move(staging, inner)  # readers see the whole file or none
    except BaseException as exc:
        if fs.get_file_info(staging).type != pafs.FileType.NotFound:
            fs.delete_file(staging)
        if is_disk_full(exc):
            raise OutputWriteError(f"quarantining {len(bad)} rows of {source} to {target} "
                                   f"failed: no space left on device") from exc
        raise


def validate_table(
    raw: pa.Table, path: str, *, with_eval: bool = False
) -> tuple[pa.Table, np.ndarray, FileReport]:
    """Check and conform one file's table.

    Returns the clean rows in the contract schema, the per-row reason codes (-1 valid) and the
    report. Raises :class:`LogContractError` on a missing or mistyped column.
    """
    report = FileReport(path=path, rows_read=raw.num_rows)
    report.notes = check_columns(raw.schema, path)
    conformed = conform(raw, with_eval=with_eval)
    reasons = row_reasons(raw, conformed, parse_hour_partition(path))
    valid = reasons < 0
    for index, count in zip(*np.unique(reasons[~valid], return_counts=True), strict=True):
        report.quarantined[REASONS[index]] = int(count)
    report.rows_valid = int(valid.sum())
    return conformed.filter(pa.array(valid)), reasons, report


def validate_file(
    path: str, root: str, quarantine_root: str | None, *, with_eval: bool = False
) -> tuple[pa.Table, FileReport]:
    """Validate one file under ``root``; write refused rows under ``quarantine_root``."""
    raw = read_raw(path)
    clean, reasons, report = validate_table(raw, path, with_eval=with_eval)
    if report.rows_quarantined and quarantine_root is not None:
        target = _quarantine_target(path, root, quarantine_root)
        write_quarantine(raw, reasons, path, target)
        report.quarantine_path = target
    if report.rows_quarantined:
        log.warning("%s: %d of %d rows quarantined %s", path, report.rows_quarantined,
                    report.rows_read, report.quarantined)
    return clean, report


def validate_dir(root: str, quarantine_root: str | None = None) -> list[FileReport]:
    """Validate every parquet file under ``root``; file-level errors are reported, not raised."""
    quarantine_root = quarantine_root or join(root, QUARANTINE_DIRNAME)
    reports = []
    for path in list_files(root):
        try:
            _, report = validate_file(path, root, quarantine_root)
        except LogContractError as exc:
            report = FileReport(path=path, error=exc.problem)
        reports.append(report)
    return reports
