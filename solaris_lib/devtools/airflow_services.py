"""Start and stop Airflow 3 on loopback: API server, scheduler and DAG processor.

One implementation for ``infra/airflow.sh`` (``make airflow-up``) and the integration tests.
The metadata DB is PostgreSQL when ``SOLARIS_AIRFLOW_DB_URL`` names one, else SQLite under the
Airflow home. The UI and the REST API need a login: a local admin whose password is generated
once, kept in ``<home>/passwords.json`` and printed; authentication is never turned off.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from solaris_lib.config import SolarisSettings, load_settings
from solaris_lib.devtools.redis_server import free_port
from solaris_lib.errors import SolarisError
from solaris_lib.sparkcds import with_archive

ADMIN_USER = "admin"
COMPONENTS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
}
SPARK_POOL = "solaris_spark"


def _secret(path: Path) -> str:
    """A random secret kept in ``path`` (created once, mode 600)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


@dataclass
class AirflowServices:
    """An Airflow deployment rooted at ``home``, serving ``dags_folder`` on 127.0.0.1:``port``."""

    home: Path
    dags_folder: Path
    port: int = field(default_factory=free_port)
    db_url: str | None = None
    spark_master: str = "local[2]"
    # Spark applications at once (the pool): what the Spark cluster fits
    spark_slots: int = SolarisSettings.model_fields["airflow_spark_slots"].default
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def password(self) -> str:
        """The local admin's password (generated on first use, then fixed)."""
        path = self.home / "passwords.json"
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({ADMIN_USER: secrets.token_urlsafe(12)}))
            path.chmod(0o600)
        return json.loads(path.read_text())[ADMIN_USER]

    def env(self) -> dict[str, str]:
        """The environment every Airflow component and CLI call of this deployment needs."""
        self.password()
        bindir = os.path.dirname(sys.executable)
        db = self.db_url or f"sqlite:///{self.home / 'airflow.db'}"
        env = {
            **os.environ,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API_AUTH__JWT_SECRET": _secret(self.home / "jwt_secret"),
            "AIRFLOW__API__SECRET_KEY": _secret(self.home / "api_secret"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": self.spark_master}),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_SUBMIT_OPTS": with_archive(os.environ.get("SPARK_SUBMIT_OPTS", "")),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        env.update(self.extra_env)
        return env

    def airflow(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """Run one ``airflow`` CLI command against this deployment."""
        command = [os.path.join(os.path.dirname(sys.executable), "airflow"), *args]
        result = subprocess.run(command, env=self.env(), capture_output=True, text=True,
                                timeout=timeout_s)
        if result.returncode != 0:
            raise SolarisError(f"airflow {' '.join(args)} failed: {result.stderr[-2000:]}")
        return result

    def prepare(self) -> None:
        """Migrate the metadata DB and create the pool that bounds concurrent Spark jobs."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.airflow("db", "migrate")
        self.airflow("pools", "set", SPARK_POOL, str(self.spark_slots),
                     "Bounds the number of concurrent SOLARIS Spark applications")

    def start(self, timeout_s: float = 120) -> None:
        """Start the three components in the background and wait until the API is healthy."""
        self.prepare()
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name, args in COMPONENTS.items():
            with open(logs / f"{name}.out", "ab") as out:
                process = subprocess.Popen(
                    [os.path.join(os.path.dirname(sys.executable), "airflow"), *args],
                    env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            (self.home / f"{name}.pid").write_text(str(process.pid))
        self.wait_healthy(timeout_s)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base_url}/api/v2/monitor/health", timeout=2) as r:
                    health = json.loads(r.read())
                if health.get("scheduler", {}).get("status") == "healthy":
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(1)
        raise SolarisError(f"Airflow did not become healthy in {timeout_s} s; see {self.home}/logs")

    def stop(self) -> None:
        """Stop every component started by :meth:`start` (their whole process groups), the
        API server last: the scheduler and the DAG processor are its clients, and it waits for
        their open connections before it exits (10 s and more when stopped first)."""
        for name in reversed(COMPONENTS):
            pidfile = self.home / f"{name}.pid"
            if not pidfile.exists():
                continue
            pid = int(pidfile.read_text())
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _wait_gone(pid, 10)
            pidfile.unlink()


def _wait_gone(pid: int, timeout_s: float) -> None:
    """Wait until the process group ``pid`` is empty, reaping its leader when this process
    started it (an unreaped leader stays in the group as a zombie), then SIGKILL what is left
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # started by another process (``make airflow-up``): its exit reaps it
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def from_settings() -> AirflowServices:
    """The project's deployment: home under the data root, DAGs from the repository's ``dags/``."""
    settings = load_settings()
    root = Path(__file__).resolve().parents[2]
    return AirflowServices(
        home=Path(os.environ.get("AIRFLOW_HOME", Path(settings.data_root) / "airflow")),
        dags_folder=root / "dags",
        port=settings.airflow_port,
        db_url=settings.airflow_db_url,
        spark_master=settings.spark_master,
        spark_slots=settings.airflow_spark_slots,
    )


def main(argv: list[str]) -> int:
    services = from_settings()
    action = argv[0] if argv else "status"
    if action == "start":
        services.start()
        print(f"Airflow UI: {services.base_url}  login: {ADMIN_USER} / {services.password()}")
        print(f"logs: {services.home}/logs; stop with `make airflow-down`")
    elif action == "stop":
        services.stop()
        print("Airflow stopped")
    elif action == "env":
        for key, value in services.env().items():
            if key.startswith(("AIRFLOW", "SPARK_", "PYSPARK")):
                print(f"export {key}={json.dumps(value)}")
    else:
        raise SystemExit("usage: python -m solaris_lib.devtools.airflow_services start|stop|env")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
