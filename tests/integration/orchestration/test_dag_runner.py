"""The demo's DAG runner (``orchestration.local.DagRunner``): one Airflow worker process runs
real DAG runs one after the other, recorded in the metadata DB, echoing each task's outcome; a
failed run raises with the worker's log, and the worker goes on serving the next run."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from solaris_lib.devtools.airflow_services import AirflowServices
from solaris_lib.intervals import Interval
from solaris_lib.orchestration.local import DagRunFailed, DagRunner
from tests.integration.conftest import ROOT
from tests.integration.reliability.test_pipeline_faults import write_empty_hour

pytestmark = pytest.mark.integration
# its own logical date: a run of a (DAG, logical date) replaces that run in the worker's DB
HOUR = Interval(datetime(2026, 4, 1, 10, tzinfo=UTC), datetime(2026, 4, 1, 11, tzinfo=UTC))
SPARK_TASKS = "mine|speculate|infer|evaluate|publish"


def test_one_worker_runs_dags_one_after_another(airflow_db, tmp_path, redis_url, key_prefix):
    from airflow.models.dagrun import DagRun

    root = tmp_path / "data"
    write_empty_hour(root / "logs", HOUR.start)  # the sensor's only partition, complete
    services = AirflowServices(
        home=Path(os.environ["AIRFLOW_HOME"]), dags_folder=ROOT / "dags",
        extra_env={"SOLARIS_DATA_ROOT": str(root), "SOLARIS_REDIS_URL": redis_url,
                   "SOLARIS_REDIS_KEY_PREFIX": key_prefix})
    echoed: list[str] = []
    with DagRunner(services, echo=echoed.append) as runner:
        with pytest.raises(DagRunFailed, match="(?s)no_such_dag for the interval ending .* ended "
                           "failed; full log: .*no DAG 'no_such_dag' in "):
            runner.run("no_such_dag", HOUR.end)
        with pytest.raises(ValueError, match="without spaces"):
            runner.run("solaris_precompute", HOUR.end, mark_success="mine | infer")
        seconds = runner.run("solaris_precompute", HOUR.end, mark_success=SPARK_TASKS)
    with pytest.raises(DagRunFailed, match=r"the DAG worker has exited \(0\)"):
        runner.run("solaris_precompute", HOUR.end)  # it ended when its input closed
    assert seconds > 0
    assert [line.split()[-2:] for line in echoed] == [["wait_for_logs", "success"]]
    [run] = DagRun.find(dag_id="solaris_precompute", logical_date=HOUR.end)
    assert run.state == "success" and run.data_interval_start == HOUR.start
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == dict.fromkeys(["wait_for_logs", *SPARK_TASKS.split("|")], "success")
    assert sorted(p.name for p in root.iterdir()) == ["logs"]  # no Spark task ran
    log = runner.log_path.read_text()
    assert "Marking success for" in log and log.count("[SOLARIS DAG RUN] end state=") == 2
