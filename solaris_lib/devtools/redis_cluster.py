"""A real Redis Cluster on loopback: N masters, each with R replicas, optionally behind a
password, from private ``redis-server`` processes and ``redis-cli --cluster create``.

Used by the multi-node integration test (a replica takes over a killed master while the lookup
client keeps serving); ``url`` is the ``redis+cluster://`` URL SOLARIS takes.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from urllib.parse import quote

from solaris_lib.devtools.redis_server import RedisServer, free_port
from solaris_lib.errors import SolarisError

NODE_TIMEOUT_MS = 2000  # a master silent this long is failed over to its replica


def cluster_ports(count: int) -> list[int]:
    """Free ports whose cluster bus port (port + 10000) is free and valid too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port < 55000 and port not in ports and _is_free(port + 10000):
            ports.append(port)
    return ports


def _is_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class RedisClusterServers:
    """``masters`` x (1 + ``replicas``) redis-server processes joined into one cluster."""

    masters: int = 3
    replicas: int = 1
    password: str | None = None
    maxmemory: str = "256mb"  # a runaway test must not eat the shared machine
    # False (as infra/redis.conf recommends): while a failed master waits for its replica's
    # promotion only its own slots refuse commands; Redis' default (True) makes every master
    # answer CLUSTERDOWN until then
    require_full_coverage: bool = False
    servers: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return "redis+cluster://" + auth + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def client(self, server: RedisServer):
        """A plain redis-py client of one node (administration, offsets)."""
        import redis

        return redis.Redis(port=server.port, password=self.password, socket_timeout=5)

    def start(self, timeout_s: float = 60) -> RedisClusterServers:
        """Start the servers and join them; on any failure, stop the ones started and raise."""
        if shutil.which("redis-cli") is None:
            raise SolarisError("redis-cli is needed to create a Redis Cluster")
        try:
            return self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> RedisClusterServers:
        auth = ("--requirepass", self.password, "--masterauth", self.password) if self.password else ()
        for port in cluster_ports(self.masters * (1 + self.replicas)):
            self.servers.append(RedisServer(port=port, password=self.password, args=(
                "--maxmemory", self.maxmemory, "--cluster-enabled", "yes",
                "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-require-full-coverage",
                "yes" if self.require_full_coverage else "no", *auth)).start())
        command = ["redis-cli", *(("-a", self.password, "--no-auth-warning") if self.password else ()),
                   "--cluster", "create", *(f"127.0.0.1:{s.port}" for s in self.servers),
                   "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise SolarisError(f"redis-cli --cluster create failed: {done.stdout[-1000:]}")
        self._wait(lambda: all(self.client(s).cluster("info").get("cluster_state") == "ok"
                               for s in self.servers) and len(self.replica_links()) ==
                   self.masters * self.replicas, timeout_s, "cluster state ok, replicas linked")
        return self

    def replica_links(self) -> list[RedisServer]:
        """Replicas whose link to their master is up."""
        return [s for s in self.servers if self.client(s).info("replication").get("role") == "slave"
                and self.client(s).info("replication").get("master_link_status") == "up"]

    def primaries(self) -> list[RedisServer]:
        """The servers that are masters now (alive ones only)."""
        alive = [s for s in self.servers if s.process is not None and s.process.poll() is None]
        return [s for s in alive if self.client(s).info("replication").get("role") == "master"]

    def wait_replicated(self, timeout_s: float = 30) -> None:
        """Until every replica acknowledged its master's whole replication stream."""
        def caught_up() -> bool:
            for master in self.primaries():
                info = self.client(master).info("replication")
                offsets = [v["offset"] for k, v in info.items() if k.startswith("slave")
                           and isinstance(v, dict)]
                if not offsets or min(offsets) < info["master_repl_offset"]:
                    return False
            return True
        self._wait(caught_up, timeout_s, "replicas caught up with their masters")

    def owner(self, key: bytes) -> RedisServer:
        """The master serving ``key``'s slot now."""
        from redis.crc import key_slot

        slot = key_slot(key)
        for master in self.primaries():
            for start, end in self._slot_ranges(master):
                if start <= slot <= end:
                    return master
        raise SolarisError(f"no live master serves slot {slot}")

    def _slot_ranges(self, server: RedisServer) -> list[tuple[int, int]]:
        myself = next(line for line in self.client(server).execute_command(
            "CLUSTER", "NODES").decode().splitlines() if "myself" in line)
        ranges = []
        for part in myself.split()[8:]:
            if not part.startswith("["):
                start, _, end = part.partition("-")
                ranges.append((int(start), int(end or start)))
        return ranges

    def _wait(self, done, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if done():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SolarisError(f"Redis Cluster: no {what} within {timeout_s} s")

    def stop(self) -> None:
        for server in self.servers:
            server.__exit__(None, None, None)
        self.servers.clear()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
