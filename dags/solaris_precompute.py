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

from airflow.sdk import DAG, DeltaDataIntervalTimetable

from solaris_lib.config import load_settings
from solaris_lib.orchestration.dagspec import START_DATE, DagSpec
from solaris_lib.orchestration.operators import spark_task
from solaris_lib.orchestration.sensors import LogPartitionSensor

spec = DagSpec.from_settings(load_settings())


with DAG(
    dag_id="solaris_precompute",
    schedule=DeltaDataIntervalTimetable(spec.interval),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=spec.dagrun_timeout,
    default_args=spec.default_args(),
    tags=["solaris", "precompute"],
    doc_md=__doc__,
) as dag:
    wait_for_logs = LogPartitionSensor(
        task_id="wait_for_logs", timeout=spec.log_wait_timeout.total_seconds()
    )
    mine = spark_task(spec, "mine", "mine_logs")
    speculate = spark_task(spec, "speculate", "speculate")
    infer = spark_task(spec, "infer", "infer_embeddings")
    evaluate = spark_task(spec, "evaluate", "evaluate")
    publish = spark_task(spec, "publish", "publish_cache")

    wait_for_logs >> [mine, evaluate]
    mine >> speculate >> infer >> publish
    evaluate >> publish
