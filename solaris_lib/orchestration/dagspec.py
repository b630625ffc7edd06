"""What the DAG files need at parse time, computed without I/O: schedules, default arguments,
templated job arguments. Kept apart from ``dags/`` so it is unit-tested like any other code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from solaris_lib.config import SolarisSettings
from solaris_lib.intervals import parse_duration
from solaris_lib.speculation.config import MineConfig
from solaris_lib.speculation.jobargs import default_lookback

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs"  # solaris_lib/jobs: ships in the wheel
SPARK_POOL = "solaris_spark"
INTERVAL_ARGS = [
    "--start", "{{ data_interval_start.isoformat() }}",
    "--end", "{{ data_interval_end.isoformat() }}",
]
# The speculate job's --scorer choices (solaris_lib.jobs.speculate.SCORERS; not imported here:
# parsing a DAG imports no job module). A unit test keeps the two equal.
SCORERS = ("auto", "learned", "heuristic")


@dataclass(frozen=True)
class DagSpec:
    """Parse-time parameters of a SOLARIS DAG."""

    interval: timedelta
    log_wait_timeout: timedelta
    task_timeout: timedelta = timedelta(hours=2)
    dagrun_timeout: timedelta = timedelta(hours=12)
    py_files: str | None = None
    key_prefix: str = "solaris"
    budget_per_user: int = 200
    global_budget: int | None = None
    max_per_user: int | None = None
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
            key_prefix=settings.redis_key_prefix,
            budget_per_user=settings.speculate_budget_per_user,
            global_budget=settings.speculate_global_budget,
            max_per_user=settings.speculate_max_per_user,
        )

    def precompute_params(self) -> dict[str, tuple[object, dict]]:
        """``{name: (default, JSON schema)}`` of the precompute DAG's run parameters. A null
        budget means the deployment's setting (the job reads 0 as "not given")."""
        nullable_count = {"type": ["null", "integer"], "minimum": 1}
        return {
            "budget_per_user": (self.budget_per_user, {
                "type": "integer", "minimum": 1,
                "description": "pairs speculated per user (SOLARIS_SPECULATE_BUDGET_PER_USER)"}),
            "global_budget": (self.global_budget, {
                **nullable_count,
                "description": "pairs speculated in total, null: no global budget"}),
            "max_per_user": (self.max_per_user, {
                **nullable_count,
                "description": "with a global budget, most pairs one user keeps"}),
            "scorer": ("auto", {
                "type": "string", "enum": list(SCORERS),
                "description": "auto: the ranking that covered most of the last labelled "
                "interval; learned or heuristic to force one"}),
            "lookback": (default_lookback(MineConfig), {
                "type": "string", "pattern": r"^[0-9]+[hdw]$",
                "description": "history window mined before the interval's end (e.g. 28d)"}),
        }

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
    """Absolute path of the module file of the job ``name`` in ``solaris_lib/jobs/`` (what
    spark-submit runs; ``python -m solaris_lib.jobs.<name>`` runs the same)."""
    return str(JOBS_DIR / f"{name}.py")


# The speculate task's arguments: the run's params (validated by Airflow), 0 for "not given".
SPECULATE_ARGS = [
    "--budget-per-user", "{{ params.budget_per_user }}",
    "--global-budget", "{{ params.global_budget or 0 }}",
    "--max-per-user", "{{ params.max_per_user or 0 }}",
    "--scorer", "{{ params.scorer }}",
]
MINE_ARGS = ["--lookback", "{{ params.lookback }}"]


def asset_uri(kind: str, spec: DagSpec) -> str:
    """``solaris://<key prefix>/<kind>``: one deployment's models and cache, named by its key
    prefix (never by a URL, which may carry a password)."""
    return f"solaris://{spec.key_prefix}/{kind}"
