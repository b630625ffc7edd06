"""The one builder of the DAGs' Spark tasks: every job of ``jobs/`` is submitted the same way.

Imports Airflow's Spark provider: used by the DAG files only, never by jobs or the client.
"""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from solaris_lib.orchestration.dagspec import (
    INTERVAL_ARGS,
    SPARK_CONF,
    SPARK_POOL,
    DagSpec,
    job_path,
)


class SparkJobOperator(SparkSubmitOperator):
    """SparkSubmitOperator whose kill (``execution_timeout``, a user's "mark failed") takes
    spark-submit's whole process tree: the provider kills only the spark-submit process (the
    driver's JVM in client mode), leaving the Python driver it started, hung or not, as an
    orphan that holds its resources."""

    def on_kill(self) -> None:
        import psutil  # an Airflow dependency

        process = getattr(getattr(self, "_hook", None), "_submit_sp", None)
        children = []
        if process is not None and process.poll() is None:
            try:
                children = psutil.Process(process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
        super().on_kill()
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(children, timeout=10)


def spark_task(spec: DagSpec, task_id: str, job: str, name: str | None = None
               ) -> SparkSubmitOperator:
    """``spark-submit jobs/<job>.py --start <interval start> --end <interval end>`` on the
    ``spark_default`` connection, in the Spark pool, as the task ``task_id`` (application name
    ``name``, default ``solaris-<task_id>``), killed whole after ``spec.task_timeout``."""
    return SparkJobOperator(
        task_id=task_id,
        application=job_path(job),
        application_args=INTERVAL_ARGS,
        conn_id="spark_default",
        name=name or f"solaris-{task_id}",
        conf=SPARK_CONF,
        py_files=spec.py_files,
        pool=SPARK_POOL,
    )
