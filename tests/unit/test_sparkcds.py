"""The JVM options that name the Spark class archive (sparkcds.py); the archive itself, built
and mapped by a real spark-submit, is tests/integration/test_spark_archive.py."""

from __future__ import annotations

import os

from solaris_lib import sparkcds


def test_options_name_the_archive_only_when_it_exists(tmp_path, monkeypatch):
    archive = tmp_path / "spark.jsa"
    monkeypatch.setattr(sparkcds, "archive_path", lambda: archive)
    assert sparkcds.java_options() == ""
    assert sparkcds.with_archive("-Xss16m") == "-Xss16m"
    archive.write_bytes(b"x")
    assert sparkcds.java_options() == f"-XX:SharedArchiveFile={archive} {sparkcds.QUIET}"
    assert sparkcds.with_archive("-Xss16m") == f"-Xss16m {sparkcds.java_options()}"


def test_use_adds_the_archive_to_spark_submit_opts_once(tmp_path, monkeypatch):
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"x")
    monkeypatch.setattr(sparkcds, "archive_path", lambda: archive)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:+UseParallelGC")
    sparkcds.use()
    sparkcds.use()
    assert os.environ["SPARK_SUBMIT_OPTS"] == f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive} {sparkcds.QUIET}"
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/elsewhere.jsa")
    sparkcds.use()  # a caller's own archive is kept
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:SharedArchiveFile=/elsewhere.jsa"


def test_no_jdk_means_no_options(monkeypatch):
    def missing():
        raise FileNotFoundError("no java")

    monkeypatch.setattr(sparkcds, "archive_path", missing)
    assert sparkcds.java_options() == ""
