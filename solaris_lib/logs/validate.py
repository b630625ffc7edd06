"""Validate request-log files: per-file reports, quarantined rows, and clean contract tables."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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


def _present(targets: set[str]) -> set[str]:
    """The quarantine files of ``targets`` that exist, found by listing each of their folders
    (an hour's) once, not by a lookup per file."""
    folders = {target.rsplit("/", 1)[0] for target in targets}
    return targets & {found for folder in folders for found in list_files(folder)}


def _remove_file(path: str) -> None:
    """Delete ``path``; gone already is fine (two readers of one hour may both remove it)."""
    fs, inner = filesystem(path)
    try:
        fs.delete_file(inner)
    except FileNotFoundError:
        pass


def quarantined_rows(paths: list[str], root: str, quarantine_root: str) -> dict[str, int]:
    """{reason: rows} refused in the log files ``paths`` (under ``root``), read from their
    quarantine files under ``quarantine_root``: what the last validation of each file refused
    (:func:`validate_files` writes a file's refused rows, and removes them when the file is
    next read clean). Empty when nothing was refused."""
    counts: Counter[str] = Counter()
    for target in _present({_quarantine_target(p, root, quarantine_root) for p in paths}):
        fs, inner = filesystem(target)
        try:
            counts.update(pq.read_table(inner, columns=["_reason"], filesystem=fs)
                          .column(0).to_pylist())
        except FileNotFoundError:  # removed since the listing: its file is clean now
            continue
    return dict(sorted(counts.items()))


@dataclass
class _Checked:
    """One file read and checked: its rows as read, conformed, and a reason code per row."""

    path: str
    raw: pa.Table
    conformed: pa.Table
    reasons: np.ndarray  # (rows,) int16 index into REASONS, -1 valid
    notes: list[str]


def _check(raw: pa.Table, path: str, with_eval: bool) -> _Checked:
    notes = check_columns(raw.schema, path)
    conformed = conform(raw, with_eval=with_eval)
    return _Checked(path, raw, conformed, row_reasons(raw, conformed, parse_hour_partition(path)),
                    notes)


def _report(checked: _Checked) -> FileReport:
    valid = checked.reasons < 0
    report = FileReport(path=checked.path, rows_read=checked.raw.num_rows,
                        rows_valid=int(valid.sum()), notes=checked.notes)
    for index, count in zip(*np.unique(checked.reasons[~valid], return_counts=True),
                            strict=True):
        report.quarantined[REASONS[index]] = int(count)
    return report


def validate_table(
    raw: pa.Table, path: str, *, with_eval: bool = False
) -> tuple[pa.Table, np.ndarray, FileReport]:
    """Check and conform one file's table.

    Returns the clean rows in the contract schema, the per-row reason codes (-1 valid) and the
    report. Raises :class:`LogContractError` on a missing or mistyped column.
    """
    checked = _check(raw, path, with_eval)
    return (checked.conformed.filter(pa.array(checked.reasons < 0)), checked.reasons,
            _report(checked))


def mark_repeats_across_files(files: list[_Checked]) -> int:
    """Mark ``duplicate_row`` every valid row repeating the ``(request_id, item_id)`` of a
    valid row of an earlier file of the list (the files of one hour, in file order: the first
    delivery is kept). Returns the rows marked."""
    valid = [np.flatnonzero(f.reasons < 0) for f in files]
    if sum(len(v) > 0 for v in valid) < 2:
        return 0
    requests = pa.chunked_array([f.conformed.column("request_id").take(pa.array(v))
                                 for f, v in zip(files, valid, strict=True)])
    codes = pc.dictionary_encode(requests).combine_chunks().indices.to_numpy()
    items = np.concatenate([f.conformed.column("item_id").take(pa.array(v)).to_numpy()
                            for f, v in zip(files, valid, strict=True)])
    _, first = np.unique(np.stack([codes.astype(np.int64), items.astype(np.int64)], axis=1),
                         axis=0, return_index=True)
    repeat = np.ones(len(items), bool)
    repeat[first] = False  # np.unique's index is the first occurrence: the earliest file
    starts = np.cumsum([0] + [len(v) for v in valid])
    code = REASONS.index("duplicate_row")
    for f, v, start in zip(files, valid, starts[:-1].tolist(), strict=True):
        f.reasons[v[repeat[start:start + len(v)]]] = code
    return int(repeat.sum())


def validate_files(
    paths: list[str], root: str, quarantine_root: str | None, *, with_eval: bool = False
) -> list[tuple[pa.Table, FileReport]]:
    """Validate ``paths`` (files under ``root``, in order) hour partition by hour partition:
    rows repeating a row of an earlier file of the same hour are ``duplicate_row`` too. Refused
    rows go under ``quarantine_root``; returns each file's clean rows and report."""
    out = []
    for hour in _by_folder(paths):
        checked = [_check(read_raw(path), path, with_eval) for path in hour]
        out.extend(_finish_hour(checked, root, quarantine_root))
    return out


def _finish_hour(checked: list[_Checked], root: str, quarantine_root: str | None
                 ) -> list[tuple[pa.Table, FileReport]]:
    """The clean rows and reports of the checked files of one hour (in file order), rows
    repeated across them marked ``duplicate_row`` first."""
    if not checked:
        return []
    repeats = mark_repeats_across_files(checked)
    if repeats:
        log.warning("%s: %d rows repeat a row of an earlier file of the hour (same "
                    "request_id and item_id): quarantined as duplicate_row",
                    checked[0].path.rsplit("/", 1)[0], repeats)
    present = set() if quarantine_root is None else \
        _present({_quarantine_target(one.path, root, quarantine_root) for one in checked})
    return [_finish(one, root, quarantine_root, present) for one in checked]


def _by_folder(paths: list[str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for path in paths:
        groups.setdefault(path.rsplit("/", 1)[0], []).append(path)
    return list(groups.values())


def _finish(checked: _Checked, root: str, quarantine_root: str | None, present: set[str]
            ) -> tuple[pa.Table, FileReport]:
    """``checked``'s clean rows and report; its refused rows written to the quarantine, or
    its quarantine file removed when it has none now (``present``: the hour's quarantine
    files: a file delivered again without bad rows)."""
    report = _report(checked)
    if quarantine_root is not None:
        target = _quarantine_target(checked.path, root, quarantine_root)
        if report.rows_quarantined:
            write_quarantine(checked.raw, checked.reasons, checked.path, target)
            report.quarantine_path = target
        elif target in present:
            _remove_file(target)
    if report.rows_quarantined:
        log.warning("%s: %d of %d rows quarantined %s", checked.path, report.rows_quarantined,
                    report.rows_read, report.quarantined)
    return checked.conformed.filter(pa.array(checked.reasons < 0)), report


def validate_file(
    path: str, root: str, quarantine_root: str | None, *, with_eval: bool = False
) -> tuple[pa.Table, FileReport]:
    """Validate one file under ``root``; write refused rows under ``quarantine_root``."""
    return validate_files([path], root, quarantine_root, with_eval=with_eval)[0]


def validate_dir(root: str, quarantine_root: str | None = None) -> list[FileReport]:
    """Validate every parquet file under ``root``, the files of each hour together; a file
    that cannot be read or lacks a column is reported with its ``error``, not raised, and the
    hour's other files are still validated together (a row repeated across them is still
    ``duplicate_row``)."""
    quarantine_root = quarantine_root or join(root, QUARANTINE_DIRNAME)
    reports = []
    for hour in _by_folder(list_files(root)):
        checked, failed = [], {}
        for path in hour:
            try:
                checked.append(_check(read_raw(path), path, False))
            except LogContractError as exc:
                failed[path] = FileReport(path=path, error=exc.problem)
        done = {r.path: r for _, r in _finish_hour(checked, root, quarantine_root)}
        reports.extend(done.get(path) or failed[path] for path in hour)
    return reports
