"""Start and stop private ``redis-server`` processes on free loopback ports.

Tests, benchmarks and the demo use these when no Redis answers at the configured URL, and the
fault tests use them to stop a server under a running client without touching a shared one.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from solaris_lib.errors import SolarisError


def delete_matching(url: str, pattern: str) -> int:
    """Delete every key matching ``pattern`` (SCAN MATCH, 500 keys per DEL) at ``url``; returns
    the number deleted. For a namespace of our own only: never FLUSHDB a shared server."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()
    return len(keys)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_server_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise SolarisError(
            "redis-server is not installed; `make test` installs it with apt-get when run as root"
        )
    return path


def answers(url: str, timeout_s: float = 0.5) -> bool:
    """True when a Redis server answers PING at ``url``."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


@dataclass
class RedisServer:
    """A private redis-server process.  ``start()`` returns once it answers PING."""

    port: int = field(default_factory=free_port)
    args: tuple[str, ...] = ()
    workdir: Path | None = None
    config_file: Path | None = None  # e.g. infra/redis.conf; its settings win over the defaults
    password: str | None = None  # the default user's (--requirepass among ``args``)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        from urllib.parse import quote

        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.workdir = self.workdir or Path(tempfile.mkdtemp(prefix="solaris-redis-"))
        defaults = () if self.config_file else ("--save", "", "--appendonly", "no")
        command = [
            redis_server_binary(), *([str(self.config_file)] if self.config_file else []),
            "--port", str(self.port), "--bind", "127.0.0.1", *defaults,
            "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log"), *self.args,
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SolarisError(f"redis-server on port {self.port} exited: {self._log_tail()}")
            if answers(self.url, 0.2):
                return self
            time.sleep(0.05)
        self.stop()
        raise SolarisError(f"redis-server on port {self.port} did not answer in {timeout_s} s")

    def _log_tail(self, lines: int = 5) -> str:
        """Last lines of the server's log and stderr (redis-server logs there, not to stderr)."""
        log_path = self.workdir / "redis.log" if self.workdir else None
        text = log_path.read_text(errors="replace") if log_path and log_path.exists() else ""
        err = self.process.stderr.read().decode(errors="replace") if self.process else ""
        return " | ".join((text + err).strip().splitlines()[-lines:]) or "no output"

    def stop(self, hard: bool = False) -> None:
        """Stop the server (SIGKILL when ``hard``, as a crash would)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def restart(self, timeout_s: float = 10.0) -> RedisServer:
        """Start again on the same port (after :meth:`stop`)."""
        self.stop()
        return self.start(timeout_s)

    def __enter__(self) -> RedisServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
        if self.workdir is not None and self.workdir.name.startswith("solaris-redis-"):
            shutil.rmtree(self.workdir, ignore_errors=True)

