"""``storage.atomic_folder``: a replaced partition is swapped with its successor in one rename,
so a reader in another process never finds it missing; where the exchange is unavailable the
folder is still replaced whole."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from solaris_lib import storage
from solaris_lib.storage import SUCCESS_MARKER, atomic_folder, is_complete

# polls the success marker for ``seconds``; prints the polls and how many found it missing
READER = """
import os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
print("ready", flush=True)
end, polls, missing = time.monotonic() + seconds, 0, 0
while time.monotonic() < end:
    polls += 1
    missing += not os.path.exists(path)
print(polls, missing)
"""


def _write(final, value: int) -> None:
    with atomic_folder(str(final)) as staging:
        pq.write_table(pa.table({"v": [value]}), f"{staging}/part-0.parquet")


def _value(final) -> int:
    return pq.read_table(final / "part-0.parquet")["v"][0].as_py()


def test_a_replaced_partition_is_never_missing_for_a_reader(tmp_path):
    probe = [tmp_path / "a", tmp_path / "b"]
    for folder in probe:
        folder.mkdir()
    if not storage._exchange(pafs.LocalFileSystem(), *map(str, probe)):
        pytest.skip("this filesystem or OS has no renameat2 exchange: the folder is moved aside")
    for folder in probe:
        folder.rmdir()
    final = tmp_path / "interval=20260105T100000Z"
    _write(final, 0)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(final / SUCCESS_MARKER), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "ready"
    replaced = 0
    while reader.poll() is None and replaced < 5000:
        replaced += 1
        _write(final, replaced)
    polls, missing = map(int, reader.stdout.read().split())
    assert replaced > 10 and polls > 1000
    assert missing == 0, f"{missing} of {polls} polls found no partition"
    assert is_complete(str(final)) and _value(final) == replaced
    assert [p.name for p in tmp_path.iterdir()] == [final.name]  # no staging or previous left


def test_without_the_exchange_the_folder_is_still_replaced_whole(tmp_path, monkeypatch):
    """A C library without renameat2, and one whose call is refused (EPERM from a sandbox's
    filter, EINVAL from a filesystem), fall back to the two moves."""
    import ctypes

    def refused(*args):
        ctypes.set_errno(1)
        return -1

    monkeypatch.setattr(storage, "_renameat2", lambda: None)
    final = tmp_path / "interval=20260105T100000Z"
    _write(final, 0)
    _write(final, 1)
    assert _value(final) == 1
    monkeypatch.setattr(storage, "_renameat2", lambda: refused)
    final = tmp_path / "interval=20260105T100000Z"
    for value in range(2, 4):
        _write(final, value)
    assert is_complete(str(final)) and _value(final) == 3
    assert sorted(p.name for p in final.iterdir()) == [SUCCESS_MARKER, "part-0.parquet"]
    assert [p.name for p in tmp_path.iterdir()] == [final.name]


def test_replacements_count_only_outputs_that_were_touched(tmp_path):
    """``replacements`` (what ``runs.claimed`` reads to withdraw a failed run's claim) moves
    when a final folder is replaced or removed, not when a write fails before its rename."""
    final = str(tmp_path / "part")
    before = storage.replacements()
    with pytest.raises(RuntimeError):
        with atomic_folder(final):
            raise RuntimeError("the job failed while writing")
    with pytest.raises(storage.OutputWriteError):
        with atomic_folder(final):
            raise OSError(28, "No space left on device")
    assert storage.replacements() == before and not (tmp_path / "part").exists()
    with atomic_folder(final):
        pass
    assert storage.replacements() == before + 1
    assert storage.remove_folder(str(tmp_path / "none")) is False
    assert storage.replacements() == before + 1
    assert storage.remove_folder(final) is True and storage.replacements() == before + 2
