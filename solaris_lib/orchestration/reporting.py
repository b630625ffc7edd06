"""The pipeline's figures where Airflow users look for them: each Spark task's report as its XCom,
its headline metrics as the XCom ``metrics``, as StatsD gauges through Airflow's metrics
(``<statsd_prefix>.solaris.<task>.<metric>``) and as the extra of the asset events of its
outlets. The figures come from the report the job runner wrote to the data root
(:func:`solaris_lib.runs.read_report`), so they reach Airflow whatever
machine the driver ran on.

No Airflow import at module level: :func:`push_metrics` takes Airflow's task context and a
``gauge`` function (Airflow's ``Stats.gauge`` in the operator, a recorder in tests).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

# job name (jobrunner.Job.name) -> the report fields that are its metrics (dotted: nested)
PIPELINE_METRICS: dict[str, tuple[str, ...]] = {
    "mine": ("rows.user_history", "rows.pair_stats", "rows.item_stats", "quarantined_rows"),
    "speculate": ("pairs", "misses_previous.lost_pairs"),
    "infer-embeddings": ("rows_written", "users", "users_without_history", "non_finite",
                         "fallback_skipped", "fallback.rows_written"),
    "evaluate": ("coverage", "coverage_unique", "coverage_known", "coverage_new", "waste",
                 "staleness_p50_s", "staleness_p99_s", "pairs_precomputed", "rows",
                 "lookup.p50_us", "lookup.p99_us", "lookup.hit_rate"),
    "publish-cache": ("pairs", "users", "keys", "cluster_pairs", "estimate_bytes", "evicted_keys"),
    "train-retrieval": ("users",),
    "train-foundation": ("promoted",),
}
STATS_PREFIX = "solaris"


def metrics_of(job_name: str, report: Mapping) -> dict[str, float]:
    """The numeric metrics of ``report`` that :data:`PIPELINE_METRICS` names for the job
    (missing, null and non-finite values left out; booleans as 0/1)."""
    found = {}
    for name in PIPELINE_METRICS.get(job_name, ()):
        value: object = report
        for part in name.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            found[name] = float(value)
    return found


def push_metrics(context: Mapping, task_id: str, metrics: Mapping[str, float],
                 gauge: Callable[..., None], joined: Mapping[str, Mapping] | None = None) -> dict:
    """XCom ``metrics``, one gauge per metric, and the asset events' extra of the task's
    outlets: its own metrics and those of the ``joined`` upstream tasks (``{task_id:
    metrics}``), each under ``<task>.<metric>``. Returns that extra."""
    context["ti"].xcom_push(key="metrics", value=dict(metrics))
    dag_id = context["dag"].dag_id
    for name, value in metrics.items():
        gauge(f"{STATS_PREFIX}.{task_id}.{name}", value, tags={"dag_id": dag_id})
    extra = {f"{task_id}.{k}": v for k, v in metrics.items()}
    for upstream, values in (joined or {}).items():
        extra.update({f"{upstream}.{k}": v for k, v in (values or {}).items()})
    extra["data_interval_start"] = context["data_interval_start"].isoformat()
    extra["data_interval_end"] = context["data_interval_end"].isoformat()
    for outlet in context["task"].outlets:
        context["outlet_events"][outlet].extra.update(extra)
    log.info("%s metrics: %s", task_id, dict(metrics))
    return extra
