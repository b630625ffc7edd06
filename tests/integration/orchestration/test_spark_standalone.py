"""A pipeline stage submitted to a real Spark standalone cluster (master + worker on loopback):
the same job file that runs in local mode, unchanged, with ``--master spark://127.0.0.1:PORT``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solaris_lib.config import SolarisSettings
from solaris_lib.devtools.spark_standalone import SparkStandalone
from solaris_lib.evaluation.serving import read_evaluation
from solaris_lib.layout import DataLayout
from tests.integration.evaluation.test_serving import THIS, expected, write_logs, write_partitions

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]


def test_evaluate_stage_runs_on_a_standalone_cluster(tmp_path, key_prefix, redis_url):
    settings = SolarisSettings(data_root=str(tmp_path / "data"), redis_url=redis_url,
                               redis_key_prefix=key_prefix)
    layout = DataLayout.from_settings(settings)
    write_logs(layout.logs)
    write_partitions(layout)
    env = {**os.environ, "SOLARIS_DATA_ROOT": settings.data_root, "SOLARIS_REDIS_URL": redis_url,
           "SOLARIS_REDIS_KEY_PREFIX": key_prefix,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with SparkStandalone(workers=1, cores_per_worker=1, workdir=tmp_path / "spark") as cluster:
        done = subprocess.run(
            ["spark-submit", "--master", cluster.master_url, "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.session.timeZone=UTC", str(ROOT / "jobs" / "evaluate.py"),
             "--start", THIS.start.isoformat(), "--end", THIS.end.isoformat()],
            env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        apps = cluster.status().get("completedapps", [])
    assert any(app.get("name") == "solaris-evaluate" for app in apps), apps
    printed = json.loads(next(line for line in reversed(done.stdout.splitlines())
                              if line.startswith("{")))
    assert printed["coverage"] == pytest.approx(expected()["coverage"])
    assert read_evaluation(layout, THIS)["waste"] == pytest.approx(expected()["waste"])
