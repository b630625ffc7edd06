"""Run the project's DAGs on this machine with ``airflow dags test`` (the demo, smoke checks).

Each call is a real DAG run: Airflow creates the run for the data interval that ends at
``run_after`` (``DeltaDataIntervalTimetable``: ``[run_after - interval, run_after)``), executes
every task in order (the sensor, then one ``spark-submit`` per Spark task) and records it in the
metadata DB. Airflow's output goes to a log file; task outcomes are echoed as they happen.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from solaris_lib.devtools.airflow_services import AirflowServices
from solaris_lib.errors import SolarisError

log = logging.getLogger(__name__)
_TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\w+)")
_TASK_STATE = re.compile(r"new_state=(success|failed|up_for_retry|skipped)")


class DagRunFailed(SolarisError):
    """A ``dags test`` run ended with a failed task."""

    exit_code = 5


def dags_test(services: AirflowServices, dag_id: str, run_after: datetime,
              *, echo=print, timeout_s: float = 900) -> float:
    """Run ``dag_id`` for the interval ending at ``run_after``; returns the wall time (s).

    Raises :class:`DagRunFailed` with the tail of Airflow's output when a task fails.
    """
    logs = services.home / "logs" / "dags-test"
    logs.mkdir(parents=True, exist_ok=True)
    out_path = logs / f"{dag_id}-{run_after:%Y%m%dT%H%M%S}.log"
    command = [str(Path(sys.executable).with_name("airflow")), "dags", "test", dag_id,
               run_after.isoformat()]
    started = time.perf_counter()
    with open(out_path, "w") as out:
        process = subprocess.Popen(command, env=services.env(), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        current: list[str] = []
        for line in process.stdout:
            out.write(line)
            _echo_task(line, started, current, echo)
        code = process.wait(timeout=timeout_s)
    elapsed = time.perf_counter() - started
    if code != 0:
        tail = out_path.read_text()[-3000:]
        raise DagRunFailed(f"{dag_id} for the interval ending {run_after.isoformat()} failed "
                           f"(exit {code}); full log: {out_path}\n{tail}")
    return elapsed


def _echo_task(line: str, started: float, current: list[str], echo) -> None:
    """Print one line per finished task attempt (the task that started last owns the state)."""
    match = _TASK_START.search(line)
    if match:
        current[:] = [match.group(1)]
        return
    match = _TASK_STATE.search(line)
    if match and current:
        echo(f"  [{time.perf_counter() - started:6.1f} s] {current[0]:<16} {match.group(1)}")
