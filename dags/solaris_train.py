"""
### SOLARIS training: retrieval factors daily, the foundation model weekly

* `solaris_train_retrieval` (daily): Spark MLlib ALS and the choice model (a softmax fitted in
  torch) over the lookback window give the user and item vectors that speculation's FAISS
  sources and scorer use. The newest vectors fitted on logs up to a precompute interval's end
  are picked up by that interval's `speculate` task (each partition records that end; the
  interval's reruns and inference read what its last run read, `docs/speculation.md`).
* `solaris_train_foundation` (weekly): trains the foundation model on the window's request logs,
  evaluates it on the following held-out day, writes a new versioned artefact, and promotes it to
  serving only when its held-out metrics are not worse than the serving version's. The next
  precompute run's `infer` task uses the serving version.

Intervals are the runs' data intervals, so backfills retrain exactly the same windows. Each
`train` task updates its asset (`solaris_retrieval_factors`, `solaris_foundation_model`), which
the precompute DAG's `speculate` and `infer` tasks read.
"""

from datetime import timedelta

from airflow.sdk import DAG, DeltaDataIntervalTimetable

from solaris_lib.config import load_settings
from solaris_lib.orchestration.dagspec import START_DATE, DagSpec
from solaris_lib.orchestration.operators import asset, spark_task
from solaris_lib.orchestration.sensors import LogPartitionSensor

spec = DagSpec.from_settings(load_settings())


def training_dag(dag_id: str, every: timedelta, job: str, tags: list[str], produces: str) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=DeltaDataIntervalTimetable(every),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=spec.dagrun_timeout,
        default_args=spec.default_args(),
        tags=["solaris", "training", *tags],
        doc_md=__doc__,
    ) as dag:
        wait = LogPartitionSensor(task_id="wait_for_logs", last_hours=1,
                                  timeout=spec.log_wait_timeout.total_seconds())
        train = spark_task(spec, "train", job, name=f"solaris-{dag_id}",
                           outlets=[asset(produces, spec)])
        wait >> train
    return dag


retrieval = training_dag("solaris_train_retrieval", timedelta(days=1), "train_retrieval",
                         ["retrieval"], produces="retrieval-factors")
foundation = training_dag("solaris_train_foundation", timedelta(weeks=1), "train_foundation",
                          ["foundation-model"], produces="foundation-model")
