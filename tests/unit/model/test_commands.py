"""CLI wiring of the model stage, and the promise that importing it does not import torch."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from solaris_lib.cli import build_parser
from solaris_lib.errors import ConfigError
from solaris_lib.model.commands import infer_request, train_request


def test_train_arguments_become_a_request():
    args = build_parser().parse_args([
        "train-foundation", "--start", "2026-01-05", "--end", "2026-01-11", "--holdout", "12h",
        "--preset", "test", "--epochs", "3", "--processes", "2", "--seed", "4"])
    request = train_request(args)
    assert request.holdout == timedelta(hours=12) and request.processes == 2
    cfg = request.config()
    assert cfg.epochs == 3 and cfg.seed == 4 and cfg.d_model == 16
    with pytest.raises(ConfigError, match="unknown model preset"):
        train_request(build_parser().parse_args([
            "train-foundation", "--start", "2026-01-05", "--end", "2026-01-11",
            "--preset", "huge"])).config()


def test_infer_arguments_become_a_request():
    args = build_parser().parse_args([
        "infer-embeddings", "--start", "2026-01-05T10:00", "--end", "2026-01-05T11:00",
        "--model-version", "20260105T000000Z-0123abcd", "--batch-users", "64"])
    request = infer_request(args)
    assert request.interval.key == "20260105T100000Z" and request.batch_users == 64
    with pytest.raises(ConfigError):
        infer_request(build_parser().parse_args([
            "infer-embeddings", "--start", "2026-01-05", "--end", "2026-01-06",
            "--model-version", "../etc"]))


def test_importing_the_stage_does_not_import_torch():
    code = ("import sys, solaris_lib.cli, solaris_lib.model, solaris_lib.model.examples, "
            "solaris_lib.evaluation.metrics, solaris_lib.model.artefact; "
            "solaris_lib.cli.build_parser(); "
            "assert 'torch' not in sys.modules and 'pyspark' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True)
