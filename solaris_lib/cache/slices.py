"""Cut a table's parquet files into row ranges that Spark tasks read directly.

The publisher (:mod:`solaris_lib.cache.inputs`) gives each Spark task a few :class:`Slice` s
and lets it open the files with pyarrow: no JVM parquet scan, no Arrow conversion between the
JVM and Python. The driver reads only the files' footers
(:func:`describe`) and cuts them (:func:`plan`) into slices balanced by rows, on row-group
boundaries where one is near.

A slice ``[start, stop)`` of a file **owns the runs of one user that begin in it** (a run: the
consecutive rows of one user id, nulls counting as one id): :func:`owned_batches` skips the
rows that continue the run of row ``start - 1`` and reads past ``stop`` to the end of the run
of row ``stop - 1``. So every row of a file is read by exactly one slice, and a user whose
rows are one run of a file (the infer job writes them so) is never cut in two by a slice
boundary: only users with rows in several runs or files are "scattered".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from solaris_lib.storage import filesystem, list_files

BATCH_ROWS = 1 << 16  # rows per record batch read
READ_BUFFER = 1 << 22  # bytes per read of a remote file's column chunk
_NULL_USER = np.iinfo(np.int64).min  # the run key of a null user id
_SNAP = 8  # snap a cut to a row-group boundary within 1/_SNAP of a slice's rows


@dataclass(frozen=True)
class Slice:
    """Rows ``[start, stop)`` of the parquet file ``path`` (with the ownership rule above)."""

    path: str
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def describe(source: str, check: Callable[[str, pa.Schema], None] | None = None
             ) -> list[tuple[str, list[int]]]:
    """(path, rows of each row group) of every parquet file under ``source`` (footers only,
    one read per file); ``check(path, arrow schema)`` runs on each footer's schema."""
    found = []
    for path in list_files(source):
        parquet = _open(path)
        if check is not None:
            check(path, parquet.schema_arrow)
        meta = parquet.metadata
        found.append((path, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]))
    return found


def plan(files: Sequence[tuple[str, Sequence[int]]], tasks: int) -> list[list[Slice]]:
    """The slices of each of at most ``tasks`` tasks, balanced by rows.

    ``files``: (path, rows of each row group). A file larger than a task's share is cut into
    about equal slices (cuts moved to a row-group boundary when one is near); the slices are
    then packed, largest first, into the task holding the fewest rows. Tasks without rows
    are left out; a partition without rows gives no task.
    """
    total = sum(sum(groups) for _, groups in files)
    if not total:
        return []
    share = math.ceil(total / max(tasks, 1))
    pieces = [piece for path, groups in files for piece in _cut(path, groups, share)]
    bins: list[list[Slice]] = [[] for _ in range(max(tasks, 1))]
    loads = [0] * len(bins)
    for piece in sorted(pieces, key=lambda p: (-p.rows, p.path, p.start)):
        lightest = loads.index(min(loads))
        bins[lightest].append(piece)
        loads[lightest] += piece.rows
    return [sorted(b, key=lambda p: (p.path, p.start)) for b in bins if b]


def _cut(path: str, groups: Sequence[int], share: int) -> list[Slice]:
    rows = int(sum(groups))
    if not rows:
        return []
    count = math.ceil(rows / share)
    bounds = np.cumsum([0, *groups])
    cuts = [0]
    for k in range(1, count):
        at = round(k * rows / count)
        near = bounds[np.argmin(np.abs(bounds - at))]
        at = int(near) if abs(int(near) - at) * _SNAP <= rows / count else at
        if cuts[-1] < at < rows:
            cuts.append(at)
    cuts.append(rows)
    return [Slice(path, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _open(path: str) -> pq.ParquetFile:
    """A local file is memory-mapped (no copy of a column chunk: a slice of a large row group
    touches only the pages it decodes); a remote one is read in buffered pieces."""
    fs, inner = filesystem(path)
    if isinstance(fs, pafs.LocalFileSystem):
        return pq.ParquetFile(inner, memory_map=True)
    return pq.ParquetFile(fs.open_input_file(inner), buffer_size=READ_BUFFER)


def owned_batches(piece: Slice, columns: Sequence[str], batch_rows: int = BATCH_ROWS
                  ) -> Iterator[pa.RecordBatch]:
    """The rows ``piece`` owns, in file order, as record batches of ``columns`` (which must
    include ``user_id``). Reads from the row group holding row ``start - 1``; stops at the
    end of the run of row ``stop - 1``."""
    file = _open(piece.path)
    meta = file.metadata
    starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    first_group = int(np.searchsorted(starts, max(piece.start - 1, 0), side="right") - 1)
    position = int(starts[first_group])
    cursor = _Cursor(piece.start, piece.stop)
    batches = file.iter_batches(batch_rows, row_groups=range(first_group, meta.num_row_groups),
                                columns=list(columns), use_threads=False)
    for batch in batches:
        lo, hi, done = cursor.step(run_keys(batch.column("user_id")), position)
        position += batch.num_rows
        if hi > lo:
            yield batch.slice(lo, hi - lo)
        if done:
            return


def run_keys(users: pa.Array) -> np.ndarray:
    """(n,) int64 user ids with nulls as one key (runs are found on these)."""
    return pc.fill_null(users, _NULL_USER).to_numpy(zero_copy_only=False)


class _Cursor:
    """Which rows of each batch a slice owns (see the module docstring)."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self.state = "skip" if start > 0 else "own"
        self.previous: int | None = None  # the user of row start - 1
        self.last: int | None = None  # the user of the last owned row so far

    def step(self, users: np.ndarray, position: int) -> tuple[int, int, bool]:
        """``(lo, hi, done)``: rows ``[lo, hi)`` of this batch (first row ``position``) are
        owned; ``done`` when no later batch holds owned rows."""
        lo = 0
        if self.state == "skip":
            lo, done = self._skip(users, position)
            if self.state == "skip" or done:
                return 0, 0, done
        if self.state == "own":
            cut = self.stop - position
            if cut > len(users):
                self.last = int(users[-1])
                return lo, len(users), False
            if cut > 0:
                self.last = int(users[cut - 1])
            self.state, lo_tail = "tail", max(cut, 0)
            hi, done = self._tail(users, lo_tail)
            return lo, hi, done
        hi, done = self._tail(users, 0)
        return 0, hi, done

    def _skip(self, users: np.ndarray, position: int) -> tuple[int, bool]:
        """Find row ``start - 1``'s user and skip the rest of its run; ``(lo, done)``."""
        end = position + len(users)
        if position <= self.start - 1 < end:
            self.previous = int(users[self.start - 1 - position])
        if end <= self.start:
            return 0, False
        lo = max(self.start - position, 0)
        other = np.flatnonzero(users[lo:] != self.previous)
        if not len(other):
            return 0, end >= self.stop
        lo += int(other[0])
        if position + lo >= self.stop:
            return 0, True
        self.state = "own"
        return lo, False

    def _tail(self, users: np.ndarray, lo: int) -> tuple[int, bool]:
        """Rows from ``lo`` that continue the last owned run; ``(hi, done)``."""
        other = np.flatnonzero(users[lo:] != self.last)
        if len(other):
            return lo + int(other[0]), True
        return len(users), False
