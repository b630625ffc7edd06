"""Every DAG imports cleanly and is configured as production DAGs must be; parsing does no
database, connection or network access and imports no heavy library."""

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from solaris_lib.intervals import parse_duration
from solaris_lib.speculation.config import MineConfig

DAGS = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors_and_every_file_defines_dags(dagbag):
    assert dagbag.import_errors == {}
    files = {Path(d.fileloc).name for d in dagbag.dags.values()}
    assert files == {p.name for p in DAGS.glob("*.py")}
    assert {"solaris_precompute", "solaris_train_retrieval", "solaris_train_foundation"} <= set(
        dagbag.dags
    )


def test_dags_have_owner_tags_fixed_start_catchup_and_retries(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.tags and "solaris" in dag.tags, dag_id
        assert isinstance(dag.start_date, datetime) and dag.start_date.tzinfo is not None, dag_id
        assert dag.catchup is False, dag_id  # explicit: backfills are started on purpose
        assert dag.doc_md, dag_id
        for task in dag.tasks:
            assert task.owner == "solaris", (dag_id, task.task_id)
            assert task.retries >= 2, (dag_id, task.task_id)
            assert task.retry_exponential_backoff, (dag_id, task.task_id)
            assert task.execution_timeout is not None, (dag_id, task.task_id)  # hung jobs die
        assert dag.dagrun_timeout is not None, dag_id  # one stuck run never holds the rest


def test_precompute_shape(dagbag):
    dag = dagbag.dags["solaris_precompute"]
    order = {t.task_id: {d.task_id for d in t.downstream_list} for t in dag.tasks}
    assert order["wait_for_logs"] == {"mine", "evaluate"}
    assert order["mine"] == {"speculate"}
    assert order["speculate"] == {"infer"}
    assert order["infer"] == {"publish"} and order["evaluate"] == {"publish"}
    spark_tasks = [t for t in dag.tasks if t.task_type == "SparkJobOperator"]
    assert {t.task_id for t in spark_tasks} == {"mine", "speculate", "infer", "evaluate", "publish"}
    for task in spark_tasks:
        assert task.pool == "solaris_spark"
        assert "{{ data_interval_start" in " ".join(task.application_args)
        assert Path(task.application).parent.name == "jobs"
    assert dag.timetable.delta.total_seconds() == 3600  # hourly by default


PARSE_PROBE = r"""
import json, socket, sys
from unittest import mock

def refuse(*args, **kwargs):
    raise AssertionError("network access at DAG parse time")

socket.socket.connect = refuse
socket.create_connection = refuse
import sqlalchemy.engine
sqlalchemy.engine.Engine.connect = refuse
from airflow.sdk import BaseHook, Variable
BaseHook.get_connection = classmethod(refuse)
Variable.get = staticmethod(refuse)
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
heavy = sorted(m for m in ("torch", "pyspark", "faiss", "redis", "pandas") if m in sys.modules)
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "dags": sorted(bag.dags), "heavy": heavy}))
"""


def test_parsing_touches_no_database_network_or_heavy_import():
    run = subprocess.run([sys.executable, "-c", PARSE_PROBE, str(DAGS)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert len(result["dags"]) == 3
    assert result["heavy"] == []


def test_precompute_params_are_validated_and_reach_the_jobs(dagbag):
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["solaris_precompute"]
    assert set(dag.params) == {"budget_per_user", "global_budget", "max_per_user", "scorer",
                               "lookback"}
    good = {"budget_per_user": 50, "global_budget": 10_000, "scorer": "heuristic"}
    for bad in ({"budget_per_user": 0}, {"scorer": "best"}, {"global_budget": -1},
                {"lookback": "four weeks"}, {"budget_per_user": "many"}):
        params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError, match=f"param {next(iter(bad))}"):
            params.update(bad)  # what a trigger's conf does
            params.validate()
    params = copy.deepcopy(dag.params)
    params.update(good)
    validated = params.validate()
    assert validated == {**good, "max_per_user": None, "lookback": validated["lookback"]}
    assert parse_duration(validated["lookback"]) == MineConfig().lookback  # the job's default
    args = " ".join(dag.get_task("speculate").application_args)
    for name in ("budget_per_user", "global_budget", "max_per_user", "scorer"):
        assert f"params.{name}" in args
    assert "params.lookback" in " ".join(dag.get_task("mine").application_args)


def test_assets_link_the_training_dags_to_the_precompute_dag(dagbag):
    produced = {dag_id: {a.uri for a in dagbag.dags[dag_id].get_task("train").outlets}
                for dag_id in ("solaris_train_retrieval", "solaris_train_foundation")}
    precompute = dagbag.dags["solaris_precompute"]
    assert {a.uri for a in precompute.get_task("speculate").inlets} == produced[
        "solaris_train_retrieval"]
    assert {a.uri for a in precompute.get_task("infer").inlets} == produced[
        "solaris_train_foundation"]
    assert [a.name for a in precompute.get_task("publish").outlets] == ["solaris_embedding_cache"]
