"""The DAG's sensor follows the log producer's contract: an hour whose file just arrived (no
``_SUCCESS``, inside the quiet period) keeps the run waiting; the marker lets it through. Real
Airflow (``dag.test`` of the sensor alone)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from tests.integration.reliability.test_pipeline_faults import (  # noqa: F401 - fixture
    LATE,
    bare_root,
    load_dag,
    task_states,
    write_empty_hour,
)

# Its own logical date: dag.test of a (DAG, logical date) replaces that DAG run in the shared
# Airflow DB, and test_pipeline_faults runs LATE on another xdist worker.
OWN = LATE.shift(timedelta(days=2))

pytestmark = pytest.mark.integration


def test_the_sensor_waits_for_the_marker_while_files_are_fresh(bare_root,  # noqa: F811
                                                               monkeypatch):
    from solaris_lib.orchestration import tasks

    folder = write_empty_hour(bare_root / "logs", OWN.start)  # a file, no marker
    pokes, poked_twice = [], threading.Event()
    real = tasks.missing_log_partitions

    def counted(*args, **kwargs):
        missing = real(*args, **kwargs)
        pokes.append(len(missing))
        if len(pokes) >= 2:
            poked_twice.set()
        return missing

    monkeypatch.setattr(tasks, "missing_log_partitions", counted)
    monkeypatch.setenv("SOLARIS_LOG_QUIET_PERIOD", "1h")
    monkeypatch.setenv("SOLARIS_LOG_WAIT_TIMEOUT", "120s")  # a bound, never reached
    dag = load_dag()
    dag.get_task("wait_for_logs").poke_interval = 1
    sensor_only = dag.partial_subset(["wait_for_logs"], include_downstream=False,
                                     include_upstream=False)

    def producer_done():
        assert poked_twice.wait(timeout=120)
        (folder / "_SUCCESS").touch()

    producer = threading.Thread(target=producer_done, daemon=True)
    producer.start()
    run = sensor_only.test(logical_date=OWN.end)
    producer.join(timeout=5)
    assert task_states(run) == {"wait_for_logs": "success"} and run.state == "success"
    assert pokes[:2] == [1, 1] and pokes[-1] == 0
