"""PySpark's modules byte-compiled inside the installation's ``pyspark.zip``.

spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` ahead of site-packages on the path of
every job's Python driver and of every Python worker (the daemon, and each worker it forks,
which imports ``pyspark.worker`` after the fork). The zip holds sources only and Python never
writes bytecode into a zip, so each of those processes compiled every PySpark module it
imported again: about 1 s of CPU per process, 2-2.5 s of a small local job's 15 s.

:func:`ensure` adds a ``.pyc`` beside each module's ``.py`` in the same zip (checked-hash
bytecode, :pep:`552`), which ``zipimport`` loads instead. A source that no longer matches its
hash, or a Python of another version (another magic number), compiles the source as before.
The entries are appended to a copy that replaces the zip whole: the original entries keep their
offsets, so a process that read the zip's directory before still reads them. PySpark's own
tests (``*/tests/*``) stay sources.

    python -m solaris_lib.sparkpyc      # add them when missing, print the zip's path

``infra/venv.sh`` and ``infra/services.sh`` (``make test``, ``make demo``) run it.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import marshal
import os
import shutil
import sys
import tempfile
import time
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

MARKER = "pyspark/__init__.pyc"  # present once the zip holds bytecode
# what reading, compiling or replacing the zip may raise (a source with null bytes: ValueError)
FAILURES = (OSError, ValueError, zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError)


def zip_path() -> Path:
    """The ``pyspark.zip`` spark-submit uses (``$SPARK_HOME``, else the installed PySpark's)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()) / "python" / "lib" / "pyspark.zip"


def bytecode_magic(path: Path) -> bytes | None:
    """The magic number of the zip's :data:`MARKER` bytecode, None when it holds none."""
    with zipfile.ZipFile(path) as archive:
        try:
            return archive.read(MARKER)[:4]
        except KeyError:
            return None


def _checked_hash_pyc(code, source: bytes) -> bytes:
    """:pep:`552` bytecode that is checked against its source's hash before use."""
    flags = 0b11  # hash-based, check the source
    return (importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little")
            + importlib.util.source_hash(source) + marshal.dumps(code))


@contextmanager
def locked(path: Path):
    """The zip ``path`` to this process alone among those that take this lock (``ensure``,
    ``benchmarks/spark_startup.py``): a lock file beside it."""
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _compiled(source: bytes, name: str) -> bytes | None:
    """Checked-hash bytecode of ``source`` compiled as ``name``, None when it does not compile
    (that module then loads from its source, as before)."""
    try:
        code = compile(source, name, "exec", dont_inherit=True, optimize=0)  # asserts kept
    except (SyntaxError, ValueError) as exc:
        log.warning("%s left as source: %s", name, exc)
        return None
    return _checked_hash_pyc(code, source)


def compile_into(path: Path) -> int:
    """Append checked-hash bytecode of every module source of the zip ``path`` (tests aside)
    to a copy of it and move the copy over ``path``; returns the count of modules compiled."""
    fd, name = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=path.parent)
    os.close(fd)
    partial = Path(name)
    try:
        shutil.copyfile(path, partial)
        with zipfile.ZipFile(partial, "a", compression=zipfile.ZIP_DEFLATED) as archive:
            sources = [info for info in archive.infolist() if info.filename.endswith(".py")
                       and "/tests/" not in info.filename]
            count = 0
            for info in sources:
                # the name a compile from the zip's source gives (tracebacks name the zip)
                pyc = _compiled(archive.read(info), f"{path}/{info.filename}")
                if pyc is not None:
                    archive.writestr(zipfile.ZipInfo(info.filename[:-3] + ".pyc",
                                                     info.date_time),
                                     pyc, compress_type=zipfile.ZIP_DEFLATED)
                    count += 1
        shutil.copymode(path, partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return count


def ensure() -> Path | None:
    """Compile the zip when it holds no bytecode yet; returns its path, None when there is no
    zip to compile or it cannot be (logged: PySpark then runs as before, compiling as it
    imports). Bytecode of another Python is left alone."""
    try:
        path = zip_path()
    except (ImportError, ValueError) as exc:  # no PySpark, or no Spark home
        log.warning("no PySpark zip to compile: %s", exc)
        return None
    if not path.is_file():
        log.warning("no PySpark zip at %s", path)
        return None
    try:
        with locked(path):  # another process may be compiling it: checked again once it is done
            return _ensure_compiled(path)
    except FAILURES as exc:
        log.warning("PySpark zip not compiled (%s): its modules compile as they load", exc)
        return None


def _ensure_compiled(path: Path) -> Path:
    """:func:`ensure` once the zip is locked."""
    magic = bytecode_magic(path)
    if magic == importlib.util.MAGIC_NUMBER:
        return path
    if magic is not None:
        log.warning("%s holds bytecode of another Python: left as it is", path)
        return path
    started = time.perf_counter()
    count = compile_into(path)
    log.info("compiled %d PySpark modules into %s in %.1f s", count, path,
             time.perf_counter() - started)
    return path


def main(args: list[str]) -> int:
    """Compile when needed and say where the zip is (``--quiet-when-present``: only a compile
    says so, naming the zip)."""
    logging.basicConfig(level=logging.INFO, format="[pyspark-zip] %(message)s")
    path = ensure()
    if path is not None and "--quiet-when-present" not in args:
        log.info("%s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
