"""The sensor that holds a precompute run until its interval's log partitions have arrived.

Imports Airflow: used by the DAG files only, never by jobs or the client.
"""

from __future__ import annotations

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSensorTimeout


class LogPartitionSensor(BaseSensorOperator):
    """Waits until every hour partition of the run's data interval is complete: it holds the
    producer's ``_SUCCESS`` marker, or parquet files none of which changed for
    ``SOLARIS_LOG_QUIET_PERIOD`` (docs/pipeline.md, the log producer's contract).

    Runs in ``reschedule`` mode (frees its worker slot between pokes). On timeout it fails with
    the list of partitions still missing, and nothing downstream runs. ``last_hours`` limits the
    wait to the interval's final hours (training windows: the newest data has arrived, older
    hours may legitimately be empty, e.g. before the logs began).
    """

    def __init__(self, *, last_hours: int | None = None, **kwargs) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 60)
        super().__init__(**kwargs)
        self.last_hours = last_hours

    def poke(self, context) -> bool:
        from solaris_lib.orchestration.tasks import logs_ready

        return logs_ready(
            context["data_interval_start"].isoformat(), context["data_interval_end"].isoformat(),
            self.last_hours,
        )

    def execute(self, context):
        try:
            return super().execute(context)
        except AirflowSensorTimeout as exc:
            from solaris_lib.config import load_settings
            from solaris_lib.intervals import Interval, parse_duration
            from solaris_lib.layout import DataLayout
            from solaris_lib.orchestration.tasks import missing_log_partitions

            interval = Interval(context["data_interval_start"], context["data_interval_end"])
            settings = load_settings()
            missing = missing_log_partitions(
                DataLayout.from_settings(settings).logs, interval, self.last_hours,
                parse_duration(settings.log_quiet_period).total_seconds())
            raise AirflowSensorTimeout(
                f"log partitions of {interval} did not arrive within {self.timeout:.0f} s; "
                f"missing: {', '.join(missing) or 'none (arrived at the last moment)'}; "
                "downstream tasks will not run. Rerun the task once the logs are there."
            ) from exc
