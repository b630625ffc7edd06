"""What the DAG files need at parse time, computed without I/O: schedules, default arguments,
templated job arguments. Kept apart from ``dags/`` so it is unit-tested like any other code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from solaris_lib.config import SolarisSettings
from solaris_lib.intervals import parse_duration

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
JOBS_DIR = Path(__file__).resolve().parents[2] / "jobs"
SPARK_POOL = "solaris_spark"
INTERVAL_ARGS = [
    "--start", "{{ data_interval_start.isoformat() }}",
    "--end", "{{ data_interval_end.isoformat() }}",
]
SPARK_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
}


@dataclass(frozen=True)
class DagSpec:
    """Parse-time parameters of a SOLARIS DAG."""

    interval: timedelta
    log_wait_timeout: timedelta
    task_timeout: timedelta = timedelta(hours=2)
    dagrun_timeout: timedelta = timedelta(hours=12)
    py_files: str | None = None
    retries: int = 2
    retry_delay: timedelta = timedelta(seconds=30)
    max_retry_delay: timedelta = timedelta(minutes=10)

    @classmethod
    def from_settings(cls, settings: SolarisSettings) -> DagSpec:
        return cls(
            interval=parse_duration(settings.interval),
            log_wait_timeout=parse_duration(settings.log_wait_timeout),
            task_timeout=parse_duration(settings.task_timeout),
            dagrun_timeout=parse_duration(settings.dagrun_timeout),
            py_files=settings.spark_py_files,
        )

    def default_args(self) -> dict:
        """Retries with exponential backoff and an execution timeout (a hung job is killed,
        then retried) for every task; owner for the UI. The sensor sets its own timeout."""
        return {
            "owner": "solaris",
            "execution_timeout": self.task_timeout,
            "retries": self.retries,
            "retry_delay": self.retry_delay,
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": self.max_retry_delay,
        }


def job_path(name: str) -> str:
    """Absolute path of a spark-submit entrypoint in ``jobs/``."""
    return str(JOBS_DIR / f"{name}.py")
