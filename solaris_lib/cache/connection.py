"""Every Redis connection of the project: redis-py (with hiredis), built from one parsed URL.

* :func:`connect`: a ``redis.Redis`` (one server) or ``redis.cluster.RedisCluster`` (the URL's
  ``+cluster`` scheme) for administration, the misses stream and other single commands;
* :class:`Nodes`: redis-py connection pools per master and redis-py's slot map, for the
  publisher's writer, which sends large pipelines of already packed commands to the master of
  each user (:func:`send_packed`; :func:`send` packs with hiredis, also for the lookup client)
  and reads every reply with redis-py's parser.

redis-py's exceptions become the cache's (:mod:`solaris_lib.cache.errors`) here, so callers
see one exception tree: a timeout is :class:`CacheTimeoutError`, a refused, reset or
unauthenticated session :class:`CacheConnectionError`, an error reply
:class:`CacheProtocolError`. No retries inside redis-py: the caller decides (the lookup client
answers misses, the publisher fails before its alias switch, Spark retries a task).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis
from hiredis import pack_command
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    MovedError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.retry import Retry

from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import (
    CacheConnectionError,
    CacheError,
    CacheProtocolError,
    CacheTimeoutError,
)

log = logging.getLogger(__name__)
MAX_REDIRECTS = 2  # slot-map reloads and resends of a writer's pipeline hit by MOVED or ASK
Command = tuple  # (name, *arguments) as redis-py's execute_command takes them
ASKING = b"*1\r\n$6\r\nASKING\r\n"  # the next command may use a slot this master imports


def connection_kwargs(endpoint: Endpoint, timeout_s: float) -> dict:
    """redis-py connection arguments of ``endpoint``: credentials, database, TLS, and
    ``timeout_s`` for connecting and for every socket operation; no retries; RESP2, whose
    raw replies (a hash as a flat list) the format's readers take."""
    kwargs: dict = {"username": endpoint.username, "password": endpoint.password,
                    "socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                    "retry": Retry(NoBackoff(), 0), "health_check_interval": 0, "protocol": 2}
    if not endpoint.cluster:
        kwargs["db"] = endpoint.db
    if endpoint.tls is not None:
        kwargs.update(ssl=True, ssl_ca_certs=endpoint.tls.ca_certs,
                      ssl_certfile=endpoint.tls.certfile, ssl_keyfile=endpoint.tls.keyfile,
                      ssl_cert_reqs=endpoint.tls.cert_reqs,
                      ssl_check_hostname=endpoint.tls.check_hostname)
    return kwargs


def connect(endpoint: Endpoint, timeout_s: float) -> redis.Redis | RedisCluster:
    """A redis-py client for ``endpoint`` (a cluster one loads the slot map from the first
    seed node that answers); a failure is a :class:`CacheError`."""
    kwargs = connection_kwargs(endpoint, timeout_s)
    with translated(f"connecting to {endpoint.redacted()}"):
        if endpoint.cluster:
            seeds = [ClusterNode(host, port) for host, port in endpoint.nodes]
            return RedisCluster(startup_nodes=seeds, require_full_coverage=False, **kwargs)
        host, port = endpoint.nodes[0]
        return redis.Redis(host=host, port=port, **kwargs)


def masters(client: redis.Redis | RedisCluster) -> list[tuple[str, redis.Redis]]:
    """``(host:port, client)`` of every master (the one server, or each cluster primary)."""
    if isinstance(client, RedisCluster):
        return [(node.name, node.redis_connection) for node in client.get_primaries()]
    kwargs = client.connection_pool.connection_kwargs
    return [(f"{kwargs['host']}:{kwargs['port']}", client)]


@contextmanager
def translated(what: object) -> Iterator[None]:
    """Raise redis-py's exceptions as the cache's, naming ``what`` was being done (any
    object: formatted only when an error is raised)."""
    try:
        yield
    except redis.TimeoutError as exc:
        raise CacheTimeoutError(f"{what}: timed out ({exc})") from exc
    except redis.AuthenticationError as exc:  # redis-py drops the reply's code
        raise CacheConnectionError(f"{what}: the server refused the credentials (WRONGPASS "
                                   f"or NOAUTH: {exc})") from exc
    except (redis.ConnectionError, OSError) as exc:
        raise CacheConnectionError(f"{what}: {exc}") from exc
    except (RedisError, RedisClusterException) as exc:
        raise CacheProtocolError(f"{what}: {exc}") from exc


class Nodes:
    """Connection pools per master and the slot map of one server or cluster, for pipelines
    whose keys share one hash tag. Thread-safe; :meth:`refresh` reloads the slot map."""

    def __init__(self, endpoint: Endpoint, timeout_s: float,
                 admin: redis.Redis | RedisCluster | None = None) -> None:
        """``timeout_s``: connect and socket timeout of the pooled connections; ``admin``: the
        client whose slot map routes (connected here when not given)."""
        self.endpoint = endpoint
        self.admin = admin if admin is not None else connect(endpoint, timeout_s)
        self.cluster = isinstance(self.admin, RedisCluster)
        self._kwargs = connection_kwargs(endpoint, timeout_s)
        self._pools: dict[str, redis.ConnectionPool] = {}
        self._lock = threading.Lock()
        self._single = masters(self.admin)[0][0] if not self.cluster else None

    def node_for_tag(self, tag: str) -> str:
        """``host:port`` of the master owning hash tag ``tag`` (a user's decimal id, or a
        whole key name without braces)."""
        if self._single is not None:
            return self._single
        return self.node_for_slot(key_slot(tag.encode()))

    def node_for_slot(self, slot: int) -> str:
        """``host:port`` of the master owning cluster slot ``slot``."""
        if self._single is not None:
            return self._single
        with translated(f"routing slot {slot}"):
            return self.admin.nodes_manager.get_node_from_slot(slot).name

    def pool(self, node: str) -> redis.ConnectionPool:
        """The connection pool of ``node`` (``host:port``), created on first use."""
        with self._lock:
            found = self._pools.get(node)
            if found is None:
                host, _, port = node.rpartition(":")
                connection_class = (redis.SSLConnection if self.endpoint.tls is not None
                                    else redis.Connection)
                kwargs = {k: v for k, v in self._kwargs.items() if k != "ssl"}
                found = self._pools[node] = redis.ConnectionPool(
                    connection_class=connection_class, host=host, port=int(port), **kwargs)
            return found

    def masters(self) -> list[str]:
        """``host:port`` of every master."""
        return [name for name, _ in masters(self.admin)]

    def refresh(self) -> None:
        """Reload the cluster's slot map (a PING for one server); a CacheError when no seed
        answers."""
        with translated(f"reloading the slot map of {self.endpoint.redacted()}"):
            if self.cluster:
                self.admin.nodes_manager.initialize()
            else:
                self.admin.ping()

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.disconnect()
        self.admin.close()


def send(pool: redis.ConnectionPool, commands: Sequence[Command]) -> list:
    """One pipelined exchange on a pooled connection: packed by hiredis, one write, every
    reply read (an error reply as a ``ResponseError`` in its place). Arguments are str, bytes
    or int. hiredis's packer is called directly: redis-py's wrapper checks every argument in
    Python first, a third of a lookup's exchange (200 fields; ``benchmarks/lookup.py``)."""
    payload = b"".join([pack_command(command) for command in commands])  # one sendall
    return send_packed(pool, [payload], len(commands))


def send_asking(pool: redis.ConnectionPool, commands: Sequence[Command],
                asking: bool) -> list:
    """:func:`send`; with ``asking``, each command after an ``ASKING`` (a master importing the
    commands' slot serves them), whose replies are dropped."""
    if not asking:
        return send(pool, commands)
    replies = send(pool, [part for command in commands for part in (("ASKING",), command)])
    refused = [r for r in replies[0::2] if isinstance(r, ResponseError)]
    if refused:
        raise CacheProtocolError(f"ASKING refused: {refused[0]}")
    return replies[1::2]


def asked_node(replies: Sequence[object]) -> str | None:
    """``host:port`` of the first ``-ASK`` among ``replies`` (a slot being migrated: the key is
    on that master, reachable after ``ASKING``; a ``-MOVED`` is not one), else None."""
    for reply in replies:
        if isinstance(reply, AskError) and not isinstance(reply, MovedError):
            return f"{reply.host}:{reply.port}"
    return None


def send_packed(pool: redis.ConnectionPool, payload: list[bytes], replies: int) -> list:
    """Send ``payload`` (packed commands, as bytes chunks) on a pooled connection and read
    ``replies`` replies (an error reply as a ``ResponseError`` in its place). A connection
    that failed is dropped."""
    connection = None
    try:
        with translated(_Where(pool)):  # the pool connects a new connection, or a dropped one
            connection = pool.get_connection()
            connection.send_packed_command(payload, check_health=False)
            answers = [_reply(connection) for _ in range(replies)]
    except CacheError:
        if connection is not None:
            connection.disconnect()
            pool.release(connection)
        raise
    pool.release(connection)
    return answers


class _Where:
    """``Redis at host:port`` of a pool, formatted only when an error message needs it (the
    lookup client's every request goes through :func:`send_packed`)."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.kwargs = pool.connection_kwargs

    def __str__(self) -> str:
        return (f"Redis at {self.kwargs.get('host', self.kwargs.get('path'))}:"
                f"{self.kwargs.get('port', '')}")


def _reply(connection) -> object:
    try:
        return connection.read_response()
    except ResponseError as exc:  # the reply was read whole: the next ones follow in order
        return exc
