"""A job entrypoint as the orchestrator runs it (spark-submit): its exit code and message say
what is wrong. Training then inference through these entrypoints run in the DAG tests (the
shared pipeline's training and precompute runs, tests/integration/conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_a_missing_input_partition_exits_2_naming_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")}
    env.update(SOLARIS_DATA_ROOT=str(tmp_path / "data"), SOLARIS_MODEL_DIR=str(tmp_path / "models"))
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    missing = subprocess.run([submit, "--master", "local[2]", str(ROOT / "jobs/infer_embeddings.py"),
                              "--start", "2026-02-01T00:00", "--end", "2026-02-01T01:00"],
                             env=env, capture_output=True, text=True, timeout=600, check=False)
    # spark-submit's PythonRunner merges the driver's stderr into its stdout
    assert missing.returncode == 2, missing.stdout[-2000:] + missing.stderr[-2000:]
    assert "speculated partition" in missing.stdout + missing.stderr
