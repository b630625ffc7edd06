"""The one builder of the DAGs' Spark tasks: every job of ``solaris_lib.jobs`` is submitted the
same way, on whatever cluster the ``spark_default`` connection names.

Imports Airflow's Spark provider: used by the DAG files only, never by jobs or the client.
Nothing here reads a connection, a variable or the network at parse time: the connection is
resolved when the task runs (:meth:`SparkJobOperator.execute`).
"""

from __future__ import annotations

import importlib
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, BaseHook, Param

from solaris_lib.orchestration.dagspec import (
    INTERVAL_ARGS,
    SPARK_POOL,
    DagSpec,
    asset_uri,
    job_path,
)


class SparkJobOperator(SparkSubmitOperator):
    """SparkSubmitOperator for a SOLARIS job.

    At run time: the Spark properties, application and main class for the connection's cluster
    and deploy mode (:func:`solaris_lib.orchestration.sparkconf.submission`), the task's
    ``SOLARIS_*`` settings forwarded to the driver and executors; after the job: its report
    (from the data root) as the XCom, its metrics pushed to XCom, StatsD and the outlets' asset
    events (:mod:`solaris_lib.orchestration.reporting`). ``joined_metrics`` names upstream
    tasks whose metrics join this task's asset events.

    Its kill (``execution_timeout``, a user's "mark failed") takes spark-submit's whole process
    tree: the provider kills only the spark-submit process (the driver's JVM in client mode),
    leaving the Python driver it started, hung or not, as an orphan holding its resources.
    """

    def __init__(self, *, job: str, joined_metrics: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.joined_metrics = joined_metrics

    def execute(self, context) -> dict | None:
        from solaris_lib.config import load_settings, settings_env
        from solaris_lib.orchestration.sparkconf import submission

        settings = load_settings()
        target = self._target()
        planned = submission(target, self.application, self.application_args or [],
                             settings_env(settings), self.py_files)
        self.application, self.application_args = planned.application, planned.application_args
        self.conf = {**planned.conf, **(self.conf or {})}
        self._java_class = planned.java_class
        self.log.info("submitting %s to %s (%s deploy mode)", self.job, target.master,
                      target.deploy_mode)
        super().execute(context)
        return self._report(context, settings)

    def _target(self):
        from solaris_lib.orchestration.sparkconf import SparkTarget

        hook_view = self._get_hook()._connection  # the provider's parse of master and mode
        extra = BaseHook.get_connection(self._conn_id).extra_dejson
        return SparkTarget.from_connection(
            hook_view["master"], {**extra, "deploy-mode": hook_view["deploy_mode"]})

    def _report(self, context, settings) -> dict | None:
        from airflow.sdk.observability.stats import gauge

        from solaris_lib.intervals import Interval
        from solaris_lib.orchestration.reporting import metrics_of, push_metrics
        from solaris_lib.runs import read_report

        name = importlib.import_module(f"solaris_lib.jobs.{self.job}").JOB.name
        interval = Interval(context["data_interval_start"], context["data_interval_end"])
        report = read_report(settings, name, interval)
        if report is None:
            self.log.warning("%s wrote no report for %s: no metrics pushed", name, interval)
            return None
        ti = context["ti"]
        joined = {task: ti.xcom_pull(task_ids=task, key="metrics") for task in self.joined_metrics}
        push_metrics(context, self.task_id, metrics_of(name, report), gauge, joined)
        return report

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


def spark_task(spec: DagSpec, task_id: str, job: str, name: str | None = None,
               args: list[str] | None = None, **kwargs: Any) -> SparkJobOperator:
    """``spark-submit solaris_lib/jobs/<job>.py --start <interval start> --end <interval end>
    [args]`` on the ``spark_default`` connection, in the Spark pool, as the task ``task_id``
    (application name ``name``, default ``solaris-<task_id>``), killed whole after
    ``spec.task_timeout``; ``kwargs`` go to the operator (``outlets``, ``inlets``,
    ``joined_metrics``)."""
    return SparkJobOperator(
        task_id=task_id,
        job=job,
        application=job_path(job),
        application_args=[*INTERVAL_ARGS, *(args or [])],
        conn_id="spark_default",
        name=name or f"solaris-{task_id}",
        py_files=spec.py_files,
        pool=SPARK_POOL,
        **kwargs,
    )


def asset(kind: str, spec: DagSpec) -> Asset:
    """The asset ``kind`` (``foundation-model``, ``retrieval-factors``, ``embedding-cache``) of
    the deployment ``spec`` describes: training DAGs produce the first two, the precompute
    DAG consumes them and produces the third. Name and URI both carry the deployment's key
    prefix (``solaris_embedding_cache`` for the default ``solaris``): Airflow keeps one active
    asset per name, so deployments sharing one Airflow must not share names."""
    return Asset(name=f"{spec.key_prefix}_{kind.replace('-', '_')}", uri=asset_uri(kind, spec))


def precompute_params(spec: DagSpec) -> dict[str, Param]:
    """The knobs of one precompute run ("Trigger DAG w/ config", REST ``conf``), validated by
    Airflow before the run starts; defaults are the deployment's ``SOLARIS_*`` settings."""
    return {name: Param(default, **schema) for name, (default, schema)
            in spec.precompute_params().items()}
