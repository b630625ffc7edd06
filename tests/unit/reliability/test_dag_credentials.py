"""Credentials never reach what the Airflow UI shows: with a password in ``SOLARIS_REDIS_URL``
while the DAGs are parsed (in a fresh process), no task's arguments, templated fields or docs
contain it (jobs read the URL from their environment, never from task arguments)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DAGS = Path(__file__).resolve().parents[3] / "dags"
SECRET = "Dag-Pa55word-never-shown"
SHOWN = ("application_args", "conf", "env_vars", "doc_md", "params", "op_args", "op_kwargs",
         "name", "application", "py_files")
SCAN = f"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(DAGS)!r})
secret = sys.argv[1]
found = {{"errors": len(bag.import_errors), "tasks": 0, "leaks": []}}
for dag in bag.dags.values():
    if secret in repr(dag.doc_md) + repr(dag.params):
        found["leaks"].append(dag.dag_id)
    for task in dag.tasks:
        found["tasks"] += 1
        names = set(task.template_fields) | set({list(SHOWN)!r})
        if any(secret in repr(getattr(task, n, None)) for n in names):
            found["leaks"].append(task.task_id)
print(json.dumps(found))
"""


def scan(url: str, secret: str = SECRET) -> dict:
    env = {**os.environ, "SOLARIS_REDIS_URL": url}
    run = subprocess.run([sys.executable, "-c", SCAN, secret], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_no_task_shows_the_redis_password():
    found = scan(f"redis://publisher:{SECRET}@cache.internal:6379/0")
    assert found["errors"] == 0 and found["tasks"] >= 6
    assert found["leaks"] == []


def test_the_scan_sees_task_arguments():
    found = scan("redis://127.0.0.1:6379/0", secret="data_interval_start")
    assert "publish" in found["leaks"] and "mine" in found["leaks"]
