"""Run the project's DAGs on this machine with Airflow's ``dag.test`` (the demo, smoke checks).

Each run is a real DAG run: Airflow creates the run for the data interval that ends at
``run_after`` (``DeltaDataIntervalTimetable``: ``[run_after - interval, run_after)``), executes
every task in order (the sensor, then one ``spark-submit`` per Spark task) and records it in the
metadata DB. Every run of a :class:`DagRunner` goes to one worker process (``python -m
solaris_lib.orchestration.local DAGS_FOLDER``, Airflow's own environment): Airflow's import and
its in-process execution API start once, not once per run as with ``airflow dags test`` (about
8 s each). The worker's output goes to a log file; task outcomes are echoed as they happen.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from datetime import datetime

from solaris_lib.devtools.airflow_services import AirflowServices
from solaris_lib.errors import SolarisError

log = logging.getLogger(__name__)
_TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\w+)")
_TASK_STATE = re.compile(r"new_state=(success|failed|up_for_retry|skipped)")
_RUN_END = "[SOLARIS DAG RUN] end state="


class DagRunFailed(SolarisError):
    """A DAG run ended with a failed task (or its worker died)."""

    exit_code = 5


class DagRunner:
    """Runs DAGs of ``services`` one after the other in one Airflow worker process; use as a
    context manager (the worker ends with it)."""

    def __init__(self, services: AirflowServices, *, echo=print) -> None:
        logs = services.home / "logs" / "dags-test"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"runs-{time.strftime('%Y%m%dT%H%M%S')}.log"
        self._echo = echo
        self._out = open(self.log_path, "w")  # noqa: SIM115 - closed by close()
        self._worker = subprocess.Popen(
            [sys.executable, "-m", __name__, str(services.dags_folder)], env=services.env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def __enter__(self) -> DagRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, dag_id: str, run_after: datetime, mark_success: str | None = None) -> float:
        """Run ``dag_id`` for the interval ending at ``run_after``; returns the wall time (s).
        ``mark_success``: a regular expression of task ids marked success instead of run
        (``airflow dags test --mark-success-pattern``).

        Raises :class:`DagRunFailed` with the tail of the worker's output when a task fails."""
        assert self._worker.stdin is not None and self._worker.stdout is not None
        if mark_success is not None and (not mark_success or any(c.isspace() for c in mark_success)):
            raise ValueError(f"mark_success must be a pattern without spaces: {mark_success!r}")
        if self._worker.poll() is not None:
            raise DagRunFailed(f"{dag_id}: the DAG worker has exited ({self._worker.returncode}); "
                               f"its log: {self.log_path}")
        started = time.perf_counter()
        self._worker.stdin.write(f"{dag_id} {run_after.isoformat()} {mark_success or ''}\n")
        self._worker.stdin.flush()
        state, current = None, []
        for line in self._worker.stdout:
            self._out.write(line)
            if line.startswith(_RUN_END):
                state = line[len(_RUN_END):].strip()
                break
            _echo_task(line, started, current, self._echo)
        self._out.flush()
        if state != "success":
            ended = f"ended {state}" if state else f"worker exited {self._worker.wait(60)}"
            tail = self.log_path.read_text()[-3000:]
            raise DagRunFailed(f"{dag_id} for the interval ending {run_after.isoformat()} "
                               f"{ended}; full log: {self.log_path}\n{tail}")
        return time.perf_counter() - started

    def close(self) -> None:
        """End the worker (it exits when its input closes) and the log."""
        if self._worker.stdin is not None and not self._worker.stdin.closed:
            self._worker.stdin.close()
        try:
            self._worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._worker.kill()
            self._worker.wait()
        self._out.close()


def serve(dags_folder: str) -> int:
    """The worker: one ``DAG_ID RUN_AFTER [MARK_SUCCESS_PATTERN]`` line (RUN_AFTER in ISO 8601)
    per run on stdin, each run with ``dag.test`` on a fresh parse of ``dags_folder``; its end is
    the line ``[SOLARIS DAG RUN] end state=<state>`` on stdout (Airflow logs to stdout too)."""
    from airflow.dag_processing.dagbag import DagBag

    for line in sys.stdin:
        dag_id, run_after, *pattern = line.split()
        state = "failed"
        try:
            bag = DagBag(dag_folder=dags_folder)
            if bag.import_errors:
                log.error("DAG import errors: %s", bag.import_errors)
            elif dag_id not in bag.dags:
                log.error("no DAG %r in %s (it has %s)", dag_id, dags_folder, sorted(bag.dags))
            else:
                run = bag.dags[dag_id].test(logical_date=datetime.fromisoformat(run_after),
                                            mark_success_pattern=pattern[0] if pattern else None)
                state = getattr(run.state, "value", run.state)
        except Exception:
            log.exception("dag.test of %s for %s raised", dag_id, run_after)
        sys.stdout.write(f"{_RUN_END}{state}\n")
        sys.stdout.flush()
    return 0


def _echo_task(line: str, started: float, current: list[str], echo) -> None:
    """Print one line per finished task attempt (the task that started last owns the state)."""
    match = _TASK_START.search(line)
    if match:
        current[:] = [match.group(1)]
        return
    match = _TASK_STATE.search(line)
    if match and current:
        echo(f"  [{time.perf_counter() - started:6.1f} s] {current[0]:<16} {match.group(1)}")


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
