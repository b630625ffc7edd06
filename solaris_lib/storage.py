"""Filesystem access for local paths and URIs (hdfs://, s3://) through pyarrow.fs.

Writers publish a folder atomically: they write into a hidden sibling and rename it into place,
so a reader sees either the previous complete folder or the new complete one, never a partial.
On a local Linux filesystem a replaced folder is exchanged with its successor in one rename
(``renameat2`` with ``RENAME_EXCHANGE``), so a reader never finds it missing either; elsewhere
(object stores, HDFS, filesystems without the exchange) the previous folder is moved aside first,
and for that moment the path holds nothing.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow.fs as pafs

from solaris_lib.errors import OutputWriteError

log = logging.getLogger(__name__)
SUCCESS_MARKER = "_SUCCESS"
# How a full disk reads in OSError (errno 28/122), pyarrow and Spark (java.io.IOException).
_DISK_FULL = ("No space left on device", "Disk quota exceeded")
_replacing = 0  # outputs this process began to replace or remove (note_replacement)


def note_replacement() -> None:
    """Count one output this process is about to replace or remove: a final folder
    (:func:`atomic_folder`, :func:`remove_folder`), or what another store serves (the cache's
    alias switch)."""
    global _replacing
    _replacing += 1


def replacements() -> int:
    """How many outputs this process has begun to replace or remove (:func:`note_replacement`):
    a run that raised with this count unchanged left every output as it was."""
    return _replacing


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem holding ``path`` and the path inside it."""
    if "://" in path:
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), path


def exists(path: str) -> bool:
    fs, inner = filesystem(path)
    return fs.get_file_info(inner).type != pafs.FileType.NotFound


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to the file ``path`` (a staging folder's: not atomic itself)."""
    fs, inner = filesystem(path)
    with fs.open_output_stream(inner) as out:
        out.write(data)


def read_bytes(path: str) -> bytes:
    """The bytes of the file ``path``."""
    fs, inner = filesystem(path)
    with fs.open_input_stream(inner) as handle:
        return handle.read()


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to the file ``path`` (a staging folder's: not atomic itself)."""
    write_bytes(path, text.encode())


def read_text(path: str) -> str:
    """The UTF-8 text of the file ``path``."""
    return read_bytes(path).decode()


def is_complete(folder: str) -> bool:
    """True when ``folder`` was published completely (it holds the success marker)."""
    return exists(f"{folder.rstrip('/')}/{SUCCESS_MARKER}")


def list_files(folder: str, suffix: str = ".parquet") -> list[str]:
    """Data files under ``folder`` (recursive), skipping names that start with ``_`` or ``.``.

    Returned paths carry the same scheme as ``folder``; sorted for determinism.
    """
    fs, inner = filesystem(folder)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return []
    selector = pafs.FileSelector(inner, recursive=True)
    prefix = folder[: len(folder) - len(inner)] if "://" in folder else ""
    found = []
    for info in fs.get_file_info(selector):
        relative = info.path[len(inner.rstrip("/")) + 1 :]
        hidden = any(part.startswith(("_", ".")) for part in relative.split("/"))
        if info.type == pafs.FileType.File and info.path.endswith(suffix) and not hidden:
            found.append(prefix + info.path)
    return sorted(found)


@contextmanager
def atomic_folder(final: str) -> Iterator[str]:
    """Yield a staging folder; on success replace ``final`` with it and mark it complete.

    On an exception the staging folder is removed and ``final`` is left as it was; a full disk
    (from Python, pyarrow or a Spark job writing into the staging folder) is re-raised as
    :class:`OutputWriteError` (exit code 7) naming the partition.
    """
    fs, inner = filesystem(final)
    parent, name = inner.rstrip("/").rsplit("/", 1)
    staging = f"{parent}/.{name}.staging-{uuid.uuid4().hex[:8]}"
    fs.create_dir(staging, recursive=True)
    prefix = final[: len(final) - len(inner)] if "://" in final else ""
    try:
        yield prefix + staging
        with fs.open_output_stream(f"{staging}/{SUCCESS_MARKER}"):
            pass
    except BaseException as exc:
        _discard(fs, staging)
        if is_disk_full(exc):
            raise OutputWriteError(
                f"writing {final} failed: no space left on its filesystem ({_first_line(exc)}). "
                f"Nothing was marked complete; the previous partition, if any, is unchanged. "
                f"Free space and rerun the task.") from exc
        raise
    note_replacement()
    previous = None
    if fs.get_file_info(inner).type != pafs.FileType.NotFound:
        if _exchange(fs, staging, inner):
            fs.delete_dir(staging)  # it now holds the previous folder
            return
        previous = f"{parent}/.{name}.previous-{uuid.uuid4().hex[:8]}"
        fs.move(inner, previous)
    fs.move(staging, inner)
    if previous is not None:
        fs.delete_dir(previous)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_REFUSALS_LOGGED: set[int] = set()  # errnos warned about once per process


@functools.cache
def _renameat2():
    """The C library's ``renameat2`` (None: not Linux, or a C library without it)."""
    if not sys.platform.startswith("linux"):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                             ctypes.c_uint]
    return function


def _exchange(fs: pafs.FileSystem, first: str, second: str) -> bool:
    """Swap the local folders ``first`` and ``second`` in one atomic rename (Linux
    ``renameat2(RENAME_EXCHANGE)``). False, having changed nothing, where that fails, whatever
    the reason: another filesystem or OS, an old C library, a filesystem that refuses it, a
    sandbox that forbids the call (the caller's moves then report a real error)."""
    renameat2 = _renameat2() if isinstance(fs, pafs.LocalFileSystem) else None
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
                 _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code not in _REFUSALS_LOGGED:
        _REFUSALS_LOGGED.add(code)
        log.warning("renameat2 exchange refused (%s, for %s): partitions are moved aside "
                    "instead, and are missing for that moment", errno.errorcode.get(code, code),
                    second)
    return False


def remove_folder(folder: str) -> bool:
    """Delete ``folder`` and everything under it; False when there was none."""
    fs, inner = filesystem(folder)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return False
    note_replacement()
    fs.delete_dir(inner)
    return True


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) says the disk or quota is full."""
    seen = 0
    while exc is not None and seen < 10:
        if getattr(exc, "errno", None) in (28, 122) or any(t in str(exc) for t in _DISK_FULL):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _discard(fs: pafs.FileSystem, staging: str) -> None:
    """Remove a staging folder; a failure is logged, never hides the error being handled."""
    try:
        fs.delete_dir(staging)
    except OSError as exc:
        log.warning("could not remove staging folder %s: %s", staging, exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for needle in _DISK_FULL:
        if needle in text:
            return needle
    return text.splitlines()[0][:200] if text else type(exc).__name__
