"""infra/grafana/solaris.json queries only metrics that exist: the client collector's documented
names and the StatsD gauges the precompute DAG's tasks emit (airflow.solaris.<task>.<metric>,
as statsd_exporter names them: dots become underscores)."""

import importlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def pipeline_gauges() -> set[str]:
    from airflow.dag_processing.dagbag import DagBag

    from solaris_lib.orchestration.reporting import PIPELINE_METRICS, STATS_PREFIX

    dag = DagBag(dag_folder=str(ROOT / "dags")).dags["solaris_precompute"]
    names = set()
    for task in dag.tasks:
        if task.task_type != "SparkJobOperator":
            continue
        job = importlib.import_module(f"solaris_lib.jobs.{task.job}").JOB.name
        for metric in PIPELINE_METRICS[job]:
            names.add(f"airflow.{STATS_PREFIX}.{task.task_id}.{metric}".replace(".", "_"))
    return names


def test_every_query_names_an_emitted_metric():
    from solaris_lib.client.metrics import METRIC_NAMES

    dashboard = json.loads((ROOT / "infra" / "grafana" / "solaris.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_bucket$", "", name) for e in exprs
            for name in re.findall(r"\b(?:solaris_client|airflow_solaris)_\w+", e)}
    client = {n for n in used if n.startswith("solaris_client")}
    pipeline = used - client
    assert client <= set(METRIC_NAMES) and len(client) >= 8
    assert pipeline <= pipeline_gauges() and {"airflow_solaris_evaluate_coverage",
                                              "airflow_solaris_evaluate_waste"} <= pipeline
    assert all(p.get("datasource") or p["type"] == "row" for p in dashboard["panels"])
