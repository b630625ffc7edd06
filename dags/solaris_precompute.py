"""
### SOLARIS precompute: one speculative precompute cycle per data interval

Each run owns its data interval `[data_interval_start, data_interval_end)` (hourly by default,
`SOLARIS_INTERVAL`) and writes only that interval's partitions, so catchup, backfills and reruns
produce the same outputs as live runs.

| task | what it does |
|---|---|
| `wait_for_logs` | waits (reschedule mode, `SOLARIS_LOG_WAIT_TIMEOUT`) for the interval's log partitions |
| `mine` | Spark: user histories, pair/item statistics, co-occurrence over the lookback window |
| `speculate` | Spark + FAISS + learned scorer: the pairs the next interval will score, under budgets |
| `infer` | Spark + torch (CUDA when present): foundation-model embeddings of those pairs |
| `evaluate` | Spark: coverage, waste, staleness and lookup latency of the version published last interval, on this interval's logs |
| `publish` | Spark -> Redis: new version namespace, checked, then the alias switched atomically |

Spark tasks share the `solaris_spark` pool. Everything is configured by `SOLARIS_*`
environment variables and the `spark_default` connection (local, standalone, YARN or
Kubernetes: no code change). See README.md.
"""

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, DeltaDataIntervalTimetable

from solaris_lib.config import load_settings
from solaris_lib.orchestration.dagspec import (
    INTERVAL_ARGS,
    SPARK_CONF,
    SPARK_POOL,
    START_DATE,
    DagSpec,
    job_path,
)
from solaris_lib.orchestration.sensors import LogPartitionSensor

spec = DagSpec.from_settings(load_settings())


def spark_task(task_id: str, job: str) -> SparkSubmitOperator:
    return SparkSubmitOperator(
        task_id=task_id,
        application=job_path(job),
        application_args=INTERVAL_ARGS,
        conn_id="spark_default",
        name=f"solaris-{task_id}",
        conf=SPARK_CONF,
        py_files=spec.py_files,
        pool=SPARK_POOL,
    )


with DAG(
    dag_id="solaris_precompute",
    schedule=DeltaDataIntervalTimetable(spec.interval),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=spec.default_args(),
    tags=["solaris", "precompute"],
    doc_md=__doc__,
) as dag:
    wait_for_logs = LogPartitionSensor(
        task_id="wait_for_logs", timeout=spec.log_wait_timeout.total_seconds()
    )
    mine = spark_task("mine", "mine_logs")
    speculate = spark_task("speculate", "speculate")
    infer = spark_task("infer", "infer_embeddings")
    evaluate = spark_task("evaluate", "evaluate")
    publish = spark_task("publish", "publish_cache")

    wait_for_logs >> [mine, evaluate]
    mine >> speculate >> infer >> publish
    evaluate >> publish
