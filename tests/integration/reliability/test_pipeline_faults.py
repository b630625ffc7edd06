"""Faults of the pipeline as the orchestrator runs it: a log partition that is missing or late
(the precompute DAG's sensor), ...

Each test drives real components: Airflow's ``dag.test`` with the repository's DAG, spark-submit
jobs, a real Redis.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from solaris_lib.intervals import Interval
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition
from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration
DAG_ID = "solaris_precompute"
DOWNSTREAM = ("mine", "speculate", "infer", "evaluate", "publish")
LATE = Interval(datetime(2026, 3, 2, 10, tzinfo=UTC), datetime(2026, 3, 2, 11, tzinfo=UTC))


def load_dag(dag_id: str = DAG_ID):
    """The repository's DAG as Airflow parses it (settings read from the environment now)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def task_states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def write_empty_hour(logs_root: Path, hour: datetime) -> Path:
    """An hour with no traffic: one empty parquet file in the contract schema, written under a
    hidden name and renamed, so a poke never sees a partial file."""
    folder = logs_root / hour_partition(hour)
    folder.mkdir(parents=True, exist_ok=True)
    hidden = folder / ".part-0.parquet.tmp"
    pq.write_table(REQUEST_LOG_SCHEMA.empty_table(), hidden)
    hidden.rename(folder / "part-0.parquet")
    return folder


@pytest.fixture
def bare_root(tmp_path, monkeypatch, airflow_db, key_prefix, redis_url):
    """A data root whose logs end one hour before ``LATE``; every SOLARIS_* variable the DAG's
    tasks read points at it (and at a key prefix of this test's own)."""
    root = tmp_path / "data"
    write_empty_hour(root / "logs", LATE.start - timedelta(hours=1))
    monkeypatch.setenv("SOLARIS_DATA_ROOT", str(root))
    monkeypatch.setenv("SOLARIS_REDIS_URL", redis_url)
    monkeypatch.setenv("SOLARIS_REDIS_KEY_PREFIX", key_prefix)
    return root


def test_missing_log_partition_times_out_and_nothing_downstream_runs(bare_root, key_prefix,
                                                                     redis_url, monkeypatch,
                                                                     capfd):
    import redis

    monkeypatch.setenv("SOLARIS_LOG_WAIT_TIMEOUT", "3s")
    dag = load_dag()
    sensor = dag.get_task("wait_for_logs")
    assert sensor.timeout == 3 and sensor.mode == "reschedule"
    sensor.poke_interval = 1  # the DAG's 60 s, shortened so the test pokes a few times
    run = dag.test(logical_date=LATE.end)

    output = capfd.readouterr()
    states = task_states(run)
    assert run.state == "failed" and states["wait_for_logs"] == "failed"
    missing = bare_root / "logs" / hour_partition(LATE.start)
    assert (f"log partitions of {LATE} did not arrive within 3 s; missing: {missing}; "
            "downstream tasks will not run") in output.out + output.err
    assert {task: states[task] for task in DOWNSTREAM} == dict.fromkeys(DOWNSTREAM,
                                                                         "upstream_failed")
    assert sorted(p.name for p in bare_root.iterdir()) == ["logs"]  # no stage wrote anything
    client = redis.Redis.from_url(redis_url)
    assert list(client.scan_iter(match=f"{key_prefix}*")) == []
    client.close()


def test_late_log_partition_lets_the_sensor_succeed(bare_root, monkeypatch):
    """The partition arrives (from another thread) after the sensor has poked twice; the next
    poke finds it. Only the sensor runs (a subset of the DAG), so nothing else is computed."""
    from solaris_lib.orchestration import tasks

    pokes, poked_twice = [], threading.Event()
    real = tasks.missing_log_partitions

    def counted(*args, **kwargs):
        missing = real(*args, **kwargs)
        pokes.append(len(missing))
        if len(pokes) >= 2:
            poked_twice.set()
        return missing

    monkeypatch.setattr(tasks, "missing_log_partitions", counted)
    monkeypatch.setenv("SOLARIS_LOG_WAIT_TIMEOUT", "120s")  # a bound, never reached
    dag = load_dag()
    dag.get_task("wait_for_logs").poke_interval = 1
    sensor_only = dag.partial_subset(["wait_for_logs"], include_downstream=False,
                                     include_upstream=False)

    def deliver():
        assert poked_twice.wait(timeout=120)
        write_empty_hour(bare_root / "logs", LATE.start)

    courier = threading.Thread(target=deliver, daemon=True)
    courier.start()
    run = sensor_only.test(logical_date=LATE.end)
    courier.join(timeout=5)
    assert task_states(run) == {"wait_for_logs": "success"} and run.state == "success"
    assert pokes[:2] == [1, 1] and pokes[-1] == 0
