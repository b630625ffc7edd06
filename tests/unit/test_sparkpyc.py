"""PySpark's zip byte-compiled in place (sparkpyc.py), on small zips of our own; the
installation's zip under a real spark-submit: tests/integration/test_spark_archive.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

from solaris_lib import sparkpyc

SOURCES = {"pyspark/__init__.py": "", "pyspark/mod.py": "X = 1\ndef f(): pass\n",
           "pyspark/tests/test_mod.py": "Y = 1\n"}


def _zip(path: Path, entries: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return path


def _import(zip_path: Path, module: str) -> tuple[str, str, str]:
    """(module.__file__, repr of its X, its f's code file name) imported from ``zip_path``
    alone in a new Python."""
    code = (f"import sys; sys.path.insert(0, {str(zip_path)!r}); import {module} as m; "
            "print(m.__file__); print(repr(m.X)); print(m.f.__code__.co_filename)")
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          check=True)
    file, value, code_file = done.stdout.split()
    return file, value, code_file


def test_modules_load_from_bytecode_beside_unchanged_entries(tmp_path):
    path = _zip(tmp_path / "pyspark.zip", SOURCES)
    with zipfile.ZipFile(path) as before:
        offsets = {i.filename: i.header_offset for i in before.infolist()}
    assert sparkpyc.bytecode_magic(path) is None
    assert sparkpyc.compile_into(path) == 2  # the tests stay sources
    with zipfile.ZipFile(path) as after:
        names = set(after.namelist())
        assert {i.filename: i.header_offset for i in after.infolist()
                if i.filename in offsets} == offsets  # a reader's old directory still holds
    assert {"pyspark/__init__.pyc", "pyspark/mod.pyc"} <= names
    assert "pyspark/tests/test_mod.pyc" not in names
    assert sparkpyc.bytecode_magic(path) == importlib.util.MAGIC_NUMBER
    file, value, code_file = _import(path, "pyspark.mod")
    assert file.endswith("pyspark/mod.pyc") and value == "1"
    assert code_file == f"{path}/pyspark/mod.py"  # as compiled from the zip's source


def test_a_changed_source_is_compiled_not_its_stale_bytecode(tmp_path):
    compiled = _zip(tmp_path / "compiled.zip", SOURCES)
    sparkpyc.compile_into(compiled)
    with zipfile.ZipFile(compiled) as archive:
        stale = archive.read("pyspark/mod.pyc")
    changed = _zip(tmp_path / "changed.zip", {**SOURCES, "pyspark/mod.py": "X = 2\ndef f(): pass\n",
                                              "pyspark/mod.pyc": stale})
    file, value, _ = _import(changed, "pyspark.mod")
    assert file.endswith("pyspark/mod.py") and value == "2"


def test_ensure_compiles_once_and_leaves_another_pythons_bytecode(tmp_path, monkeypatch):
    path = _zip(tmp_path / "pyspark.zip", SOURCES)
    monkeypatch.setattr(sparkpyc, "zip_path", lambda: path)
    assert sparkpyc.ensure() == path
    assert sparkpyc.bytecode_magic(path) == importlib.util.MAGIC_NUMBER
    compiled = path.read_bytes()
    assert sparkpyc.ensure() == path and path.read_bytes() == compiled  # nothing to do

    other_magic = b"\x00\x00\r\n" + b"\x00" * 12
    foreign = _zip(tmp_path / "foreign.zip", {**SOURCES, sparkpyc.MARKER: other_magic})
    monkeypatch.setattr(sparkpyc, "zip_path", lambda: foreign)
    before = foreign.read_bytes()
    assert sparkpyc.ensure() == foreign and foreign.read_bytes() == before


def test_no_zip_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sparkpyc, "zip_path", lambda: tmp_path / "missing.zip")
    assert sparkpyc.ensure() is None


def test_a_module_that_does_not_compile_stays_source_and_the_rest_compile(tmp_path):
    path = _zip(tmp_path / "pyspark.zip", {**SOURCES, "pyspark/bad.py": "def (:\n",
                                           "pyspark/nul.py": b"X = 1\x00\n"})
    assert sparkpyc.compile_into(path) == 2
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert "pyspark/mod.pyc" in names and not {"pyspark/bad.pyc", "pyspark/nul.pyc"} & names
    assert [p.name for p in tmp_path.iterdir()] == ["pyspark.zip"]  # no partial copy left
