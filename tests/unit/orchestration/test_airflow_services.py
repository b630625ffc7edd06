"""Stopping the Airflow deployment of ``make airflow-up``, the demo and the integration tests:
process groups are emptied, and a component this process started is reaped (a zombie leader
stays in its group: ``stop`` waited its whole timeout for each component and then sent a
SIGKILL that a zombie ignores)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from solaris_lib.devtools.airflow_services import COMPONENTS, AirflowServices, _wait_gone

SLEEPER = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
           "time.sleep(60)")


def _group(code: str = SLEEPER) -> subprocess.Popen:
    """A process group of one Python process, once it has set its SIGTERM handler."""
    ready = code.replace("; time", "; print(flush=True); time")
    process = subprocess.Popen([sys.executable, "-c", ready], start_new_session=True,
                               stdout=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    return process


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_child_leader_that_exits_on_sigterm_is_reaped_and_its_group_is_empty():
    leader = _group()
    os.killpg(leader.pid, signal.SIGTERM)
    _wait_gone(leader.pid, 30)
    assert _reaped(leader.pid)


def test_a_group_that_ignores_sigterm_is_killed_at_the_timeout():
    leader = _group("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                    "time.sleep(60)")
    os.killpg(leader.pid, signal.SIGTERM)
    _wait_gone(leader.pid, 0.5)
    _wait_gone(leader.pid, 10)  # the SIGKILLed leader reaped
    assert _reaped(leader.pid)


def test_stop_signals_every_component_and_removes_its_pid_file(tmp_path):
    services = AirflowServices(home=tmp_path, dags_folder=tmp_path, port=1)
    leaders = {name: _group() for name in COMPONENTS}
    for name, process in leaders.items():
        (tmp_path / f"{name}.pid").write_text(str(process.pid))
    services.stop()
    assert all(_reaped(p.pid) for p in leaders.values())
    assert not list(tmp_path.glob("*.pid"))
