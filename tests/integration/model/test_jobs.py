"""The job entrypoints as the orchestrator runs them: python for training, spark-submit for
inference (both slow: a fresh interpreter, and a fresh Spark application)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.storage import is_complete
from tests.conftest import ROOT
from tests.integration.model.conftest import INFER

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _report(stdout: str) -> dict:
    """The job's JSON report line (spark-submit may print other lines around it)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1])


def _env(settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")}
    env.update(SOLARIS_DATA_ROOT=settings.data_root, SOLARIS_MODEL_DIR=settings.models_root)
    return env


def test_jobs_train_then_infer(inference_inputs, tmp_path):
    from solaris_lib.config import load_settings

    base, pairs, _ = inference_inputs
    settings = load_settings(data_root=base.data_root, model_dir=str(tmp_path / "models"))
    train = subprocess.run(
        [sys.executable, str(ROOT / "jobs/train_foundation.py"), "--start", "2026-01-05",
         "--end", "2026-01-08", "--preset", "test", "--epochs", "1"],
        env=_env(settings), capture_output=True, text=True, timeout=600, check=False)
    assert train.returncode == 0, train.stderr[-2000:]
    version = _report(train.stdout)["version"]

    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    args = [submit, "--master", "local[2]", str(ROOT / "jobs/infer_embeddings.py"),
            "--start", INFER.start.isoformat(), "--end", INFER.end.isoformat()]
    infer = subprocess.run(args, env=_env(settings), capture_output=True, text=True,
                           timeout=600, check=False)
    assert infer.returncode == 0, infer.stderr[-2000:]
    report = _report(infer.stdout)
    assert report["model_version"] == version and report["rows_written"] > 0
    assert is_complete(DataLayout.from_settings(settings).output(EMBEDDINGS, INFER))

    missing = subprocess.run(args[:-4] + ["--start", "2026-02-01T00:00", "--end",
                                          "2026-02-01T01:00"],
                             env=_env(settings), capture_output=True, text=True, timeout=600,
                             check=False)
    # spark-submit's PythonRunner merges the driver's stderr into its stdout
    assert missing.returncode == 2
    assert "speculated partition" in missing.stdout + missing.stderr
