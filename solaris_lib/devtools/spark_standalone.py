"""A real Spark standalone cluster (one master, N workers) on loopback, from pip's pyspark.

The same jobs that run in ``local[N]`` run here unchanged with ``--master spark://127.0.0.1:PORT``
(and on YARN or Kubernetes with their masters): scale-out is configuration.
Used by ``infra/spark-standalone.sh`` and the cluster integration test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from solaris_lib.devtools.redis_server import free_port
from solaris_lib.errors import SolarisError
from solaris_lib.sparkcds import with_archive


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class SparkStandalone:
    """Master + workers as child processes; ``start()`` returns when the workers registered."""

    workers: int = 1
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    # the master's REST submission server (status of drivers in cluster deploy mode, what
    # Airflow's Spark operator polls); None: off, as Spark's default
    rest_port: int | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="solaris-spark-")))
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        bindir = os.path.dirname(sys.executable)
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
            "SPARK_WORKER_DIR": str(self.workdir / "work"),
            "SPARK_DAEMON_JAVA_OPTS": with_archive(os.environ.get("SPARK_DAEMON_JAVA_OPTS", "")),
            "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            **({"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=true "
                f"-Dspark.master.rest.port={self.rest_port}"} if self.rest_port else {}),
        }

    def _spawn(self, name: str, *args: str) -> None:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        with open(logs / f"{name}.out", "ab") as out:
            self.processes.append(subprocess.Popen(
                command, env=self._env(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            ))

    def start(self, timeout_s: float = 90) -> SparkStandalone:
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui_port))
        for index in range(self.workers):
            self._spawn(f"worker-{index}", "org.apache.spark.deploy.worker.Worker",
                        "--host", "127.0.0.1", "--cores", str(self.cores_per_worker),
                        "--memory", self.memory_per_worker, "--webui-port", str(free_port()),
                        self.master_url)
        self._wait_for_workers(timeout_s)
        return self

    def status(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as r:
            return json.loads(r.read())

    def _wait_for_workers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                self.stop()
                raise SolarisError(f"a Spark daemon exited early; see {self.workdir}/logs")
            try:
                if self.status().get("aliveworkers", 0) >= self.workers:
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise SolarisError(f"Spark standalone did not register {self.workers} workers in {timeout_s} s")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self.processes.clear()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    """``start`` runs a cluster in the foreground until interrupted (used by infra scripts)."""
    workers = int(argv[1]) if len(argv) > 1 else 1
    cluster = SparkStandalone(workers=workers, port=int(os.environ.get("SPARK_MASTER_PORT", "7077")))
    cluster.start()
    print(f"Spark standalone master {cluster.master_url}, UI http://127.0.0.1:{cluster.webui_port}",
          flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
