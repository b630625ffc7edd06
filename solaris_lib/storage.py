"""Filesystem access for local paths and URIs (hdfs://, s3://) through pyarrow.fs.

Writers publish a folder atomically: they write into a hidden sibling and rename it into place,
so a reader sees either the previous complete folder or the new complete one, never a partial.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow.fs as pafs

SUCCESS_MARKER = "_SUCCESS"


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem holding ``path`` and the path inside it."""
    if "://" in path:
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), path


def exists(path: str) -> bool:
    fs, inner = filesystem(path)
    return fs.get_file_info(inner).type != pafs.FileType.NotFound


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

    On an exception the staging folder is removed and ``final`` is left as it was.
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
    except BaseException:
        fs.delete_dir(staging)
        raise
    previous = None
    if fs.get_file_info(inner).type != pafs.FileType.NotFound:
        previous = f"{parent}/.{name}.previous-{uuid.uuid4().hex[:8]}"
        fs.move(inner, previous)
    fs.move(staging, inner)
    if previous is not None:
        fs.delete_dir(previous)
