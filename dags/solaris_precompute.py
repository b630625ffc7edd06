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
Kubernetes, client or cluster deploy mode: no code change; docs/scaling.md).

**Run parameters** ("Trigger DAG w/ config"): `budget_per_user`, `global_budget`,
`max_per_user`, `scorer`, `lookback`, validated before the run starts. The interval itself is the
run's data interval (the schedule, `SOLARIS_INTERVAL`; a manual run of another interval passes
`data_interval_start`/`data_interval_end` through the REST API; partitions are keyed by the start,
so a run whose start another run of another length used fails, exit 2, docs/pipeline.md).

**Assets**: `speculate` and `infer` read the training DAGs' `solaris_retrieval_factors` and
`solaris_foundation_model`; `publish` updates `solaris_embedding_cache`, whose events carry the
run's coverage, waste, staleness and pair counts (also each task's XCom and StatsD gauges).
"""

from airflow.sdk import DAG, DeltaDataIntervalTimetable

from solaris_lib.config import load_settings
from solaris_lib.orchestration.dagspec import MINE_ARGS, SPECULATE_ARGS, START_DATE, DagSpec
from solaris_lib.orchestration.operators import asset, precompute_params, spark_task
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
    params=precompute_params(spec),
    tags=["solaris", "precompute"],
    doc_md=__doc__,
) as dag:
    wait_for_logs = LogPartitionSensor(
        task_id="wait_for_logs", timeout=spec.log_wait_timeout.total_seconds()
    )
    mine = spark_task(spec, "mine", "mine_logs", args=MINE_ARGS)
    speculate = spark_task(spec, "speculate", "speculate", args=SPECULATE_ARGS,
                           inlets=[asset("retrieval-factors", spec)])
    infer = spark_task(spec, "infer", "infer_embeddings", inlets=[asset("foundation-model", spec)])
    evaluate = spark_task(spec, "evaluate", "evaluate")
    publish = spark_task(spec, "publish", "publish_cache", outlets=[asset("embedding-cache", spec)],
                         joined_metrics=("mine", "speculate", "infer", "evaluate"))

    wait_for_logs >> [mine, evaluate]
    mine >> speculate >> infer >> publish
    evaluate >> publish
