"""A hung Spark job is killed by its task's execution_timeout, with every process it started,
and the retry succeeds: the precompute DAG's ``publish`` task run by Airflow (``dag.test``)
with its spark-submit application replaced by one whose first attempt sleeps
(tests/hung_job.py). The timeout is the DAG's own, from SOLARIS_TASK_TIMEOUT."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.integration.conftest import ROOT
from tests.integration.reliability.test_pipeline_faults import (  # noqa: F401 - fixture
    LATE,
    bare_root,
    load_dag,
    record_failures,
    task_states,
    wait_until_gone,
)

# Its own logical date: dag.test of a (DAG, logical date) replaces that DAG run in the shared
# Airflow DB, and test_pipeline_faults runs LATE on another xdist worker.
OWN = LATE.shift(timedelta(days=1))

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_hung_job_is_killed_at_its_timeout_and_retried(bare_root, monkeypatch,  # noqa: F811
                                                         tmp_path):
    marker = f"HUNG_JOB_MARKER={uuid.uuid4().hex}"
    monkeypatch.setenv("HUNG_JOB_DIR", str(tmp_path))
    monkeypatch.setenv(*marker.split("="))
    monkeypatch.setenv("SOLARIS_TASK_TIMEOUT", "20s")
    dag = load_dag()
    task = dag.get_task("publish")
    assert task.execution_timeout == timedelta(seconds=20) and task.retries >= 1
    assert dag.dagrun_timeout is not None
    task.application = str(ROOT / "tests" / "hung_job.py")
    task.retry_delay, task.retry_exponential_backoff = timedelta(seconds=1), False
    failures = record_failures(dag, "publish")
    attempts: list[BaseException] = []
    task.on_retry_callback = [lambda context: attempts.append(context["exception"])]
    alone = dag.partial_subset(["publish"], include_upstream=False, include_downstream=False)

    run = alone.test(logical_date=OWN.end)

    assert task_states(run) == {"publish": "success"} and run.state == "success"
    assert failures == {} and len(attempts) == 1
    assert "Timeout" in type(attempts[0]).__name__  # the first attempt: killed, then retried
    assert sorted(p.name for p in tmp_path.glob("attempt-*")) == ["attempt-0", "attempt-1"]
    assert wait_until_gone(marker) == []  # the hung Python driver died with its JVM
