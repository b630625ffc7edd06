"""How the client talks to Redis: a small interface, the real transport and an in-memory fake.

The client sends every command through a :class:`Transport`: pipelines of commands on the keys
of one hash tag (a lookup's HMGETs, the alias GET, a manifest HGETALL, miss XADDs), PINGs of a
master, and slot-map reloads. Replies are redis-py's (bytes, None, lists; a hash as a dict);
an error reply is an exception instance in its place, and a failure to get any reply raises
:class:`CacheError` (a timeout :class:`CacheTimeoutError`, a connection problem
:class:`CacheConnectionError`).

* :class:`RedisTransport`: redis-py (with hiredis) clients, one per timeout: ``timeout_ms`` for
  lookups and ``background_timeout_ms`` for everything else (``Redis``, or ``RedisCluster``
  whose pipelines follow ``MOVED`` and ``ASK``). A lookup is one exchange on a pooled
  connection of the node's client, packed by hiredis (:func:`~solaris_lib.cache.connection.
  send`): ``benchmarks/lookup.py`` measures it against redis-py's ``Pipeline`` of the same
  commands, which costs more than 15 % more at p50 (its wrapper checks each of 200 arguments
  in Python, and builds a pipeline object per call); background commands use pipelines;
* :class:`MockTransport`: a handler function answers each command in-process, for unit tests
  (the model is httpx's ``MockTransport``); :class:`InMemoryRedis` is such a handler with the
  few commands the client sends, over dicts.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, ResponseError, TryAgainError

from solaris_lib.cache.connection import Command, connect, send, translated
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheConnectionError


class Transport(ABC):
    """What the client needs from Redis (see the module docstring)."""

    @abstractmethod
    def node(self, tag: str) -> str:
        """``host:port`` of the master owning hash tag ``tag``."""

    @abstractmethod
    def lookup(self, tag: str, commands: Sequence[Command]) -> list:
        """The lookup pipeline (``commands`` on keys of ``tag``), within the lookup timeout."""

    @abstractmethod
    def background(self, tag: str, commands: Sequence[Command]) -> list:
        """A background pipeline (``commands`` on keys of ``tag``), within the background
        timeout."""

    @abstractmethod
    def ping(self, node: str) -> None:
        """PING ``node``; raises :class:`CacheError` unless it answers."""

    @abstractmethod
    def masters(self) -> list[str]:
        """``host:port`` of every master now."""

    @property
    @abstractmethod
    def stale(self) -> bool:
        """True when the slot map should be reloaded (:meth:`refresh`)."""

    @abstractmethod
    def mark_stale(self) -> None:
        """Ask for a reload of the slot map (a failover may have moved slots)."""

    @abstractmethod
    def refresh(self) -> None:
        """Connect or reload the slot map; raises :class:`CacheError` when no node answers."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection."""


class RedisTransport(Transport):
    """redis-py clients for one Redis server or cluster (the URL's); connected by the first
    :meth:`refresh` (a cluster's seeds may not answer yet when the client starts)."""

    def __init__(self, endpoint: Endpoint, timeout_ms: float, background_timeout_ms: float):
        self.endpoint = endpoint
        self._timeouts = (timeout_ms / 1000.0, background_timeout_ms / 1000.0)
        self._lock = threading.Lock()
        self._clients: tuple[redis.Redis | RedisCluster, ...] | None = None
        self._stale = True
        self._closed = False  # a closed transport never connects again

    @classmethod
    def from_url(cls, url: str, timeout_ms: float, background_timeout_ms: float
                 ) -> RedisTransport:
        """The transport of ``url``; a bad URL is a :class:`CacheConfigError`."""
        return cls(Endpoint.from_url(url), timeout_ms, background_timeout_ms)

    def _client(self, fast: bool) -> redis.Redis | RedisCluster:
        clients = self._clients
        if clients is None:
            raise CacheConnectionError(f"{self.endpoint.redacted()}: not connected yet (the "
                                       f"background thread keeps trying)")
        return clients[0 if fast else 1]

    def node(self, tag: str) -> str:
        client = self._client(fast=True)
        if isinstance(client, RedisCluster):
            with translated(f"routing hash tag {tag}"):
                return client.nodes_manager.get_node_from_slot(key_slot(tag.encode())).name
        return self._single

    def lookup(self, tag: str, commands: Sequence[Command]) -> list:
        """One round trip to the node owning ``tag``, whose slot all of a lookup's keys share.
        On a cluster that is a plain exchange with that node (a stalled node costs one timeout:
        redis-py's cluster pipeline would resend each timed-out command on its own); a slot
        that moved or is moving (MOVED, ASK, TRYAGAIN) goes again through the cluster pipeline,
        which follows redirections, and asks for a reload of the slot map."""
        client = self._client(fast=True)
        if not isinstance(client, RedisCluster):
            return send(client.connection_pool, commands)
        with translated(f"routing hash tag {tag}"):
            node = client.nodes_manager.get_node_from_slot(key_slot(tag.encode()))
            owner = client.get_redis_connection(node)
        replies = send(owner.connection_pool, commands)
        if any(isinstance(r, (AskError, TryAgainError)) for r in replies):
            self.mark_stale()
            replies = self._pipeline(client, commands)
        return replies

    def background(self, tag: str, commands: Sequence[Command]) -> list:
        return self._pipeline(self._client(fast=False), commands)

    def _pipeline(self, client, commands: Sequence[Command]) -> list:
        """The replies of ``commands`` (an error reply as a ``ResponseError`` in its place); a
        failed exchange raises, as a timeout or a connection error. (redis-py's cluster
        pipeline puts a node's timeout or connection error in the replies instead.)"""
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        with translated(f"Redis at {self.endpoint.redacted()}"):
            replies = pipe.execute(raise_on_error=False)
            for reply in replies:
                if isinstance(reply, (redis.ConnectionError, redis.TimeoutError)):
                    raise reply
            return replies

    def ping(self, node: str) -> None:
        client = self._client(fast=False)
        with translated(f"PING {node}"):
            if isinstance(client, RedisCluster):
                target = client.get_node(node_name=node)
                if target is None:
                    raise CacheConnectionError(f"{node} is not a node of the cluster now")
                client.ping(target_nodes=target)
            else:
                client.ping()

    def masters(self) -> list[str]:
        client = self._client(fast=False)
        if isinstance(client, RedisCluster):
            return [node.name for node in client.get_primaries()]
        return [self._single]

    @property
    def _single(self) -> str:
        host, port = self.endpoint.nodes[0]
        return f"{host}:{port}"

    @property
    def stale(self) -> bool:
        return self._stale

    def mark_stale(self) -> None:
        self._stale = self._clients is None or self.endpoint.cluster

    def refresh(self) -> None:
        with self._lock:
            if self._closed:  # a background thread that outlived close() must not reconnect
                raise CacheConnectionError(f"{self.endpoint.redacted()}: the client is closed")
            if self._clients is None:
                self._clients = tuple(connect(self.endpoint, timeout)
                                      for timeout in self._timeouts)
            elif self.endpoint.cluster:
                with translated(f"reloading the slot map of {self.endpoint.redacted()}"):
                    for client in self._clients:
                        client.nodes_manager.initialize()
            else:
                with translated(f"PING {self.endpoint.redacted()}"):
                    self._clients[1].ping()
            self._stale = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for client in self._clients or ():
                client.close()
            self._clients = None


Handler = Callable[[Command], object]


class MockTransport(Transport):
    """A transport whose every command is answered in-process by ``handler(command)``.

    ``command`` is a tuple as the client sends it (``("HMGET", key, 7, 8)``); the handler
    returns the reply as redis-py would (bytes, None, a list, a dict for HGETALL, or an
    exception instance for an error reply) or raises :class:`CacheError` to simulate a failed
    exchange (a :class:`CacheTimeoutError` counts as a timeout). Every master is ``mock:0``.
    """

    NODE = "mock:0"

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self._stale = False

    def node(self, tag: str) -> str:
        return self.NODE

    def lookup(self, tag: str, commands: Sequence[Command]) -> list:
        return [self.handler(tuple(command)) for command in commands]

    def background(self, tag: str, commands: Sequence[Command]) -> list:
        return [self.handler(tuple(command)) for command in commands]

    def ping(self, node: str) -> None:
        reply = self.handler(("PING",))
        if reply is not True:
            raise CacheConnectionError(f"PING {node} answered {reply!r}")

    def masters(self) -> list[str]:
        return [self.NODE]

    @property
    def stale(self) -> bool:
        return self._stale

    def mark_stale(self) -> None:
        self._stale = False

    def refresh(self) -> None:
        self.handler(("PING",))

    def close(self) -> None:
        """Nothing to close."""


class InMemoryRedis:
    """A :class:`MockTransport` handler over dicts: strings (``GET``/``GETRANGE``/``SET``), hashes
    (``HSET``/``HGETALL``/``HMGET``), streams (``XADD``: the entries are kept in a list) and
    ``PING``. Keys and fields are compared as bytes; any other command is an error reply."""

    def __init__(self) -> None:
        self.strings: dict[bytes, bytes] = {}
        self.hashes: dict[bytes, dict[bytes, bytes]] = {}
        self.streams: dict[bytes, list[dict[bytes, bytes]]] = {}
        self.commands: list[Command] = []

    def __call__(self, command: Command) -> object:
        self.commands.append(command)
        name, *args = [_bytes(part) for part in command]
        answer = getattr(self, f"_{name.decode().lower()}", None)
        if answer is None:
            return ResponseError(f"unknown command '{name.decode()}'")
        held = ("string" if args and args[0] in self.strings else
                "hash" if args and args[0] in self.hashes else None)
        wanted = _KINDS.get(name)
        if held and wanted and held != wanted:
            return ResponseError("WRONGTYPE Operation against a key holding the wrong kind "
                                 "of value")
        return answer(*args)

    def _ping(self) -> bool:
        return True

    def _get(self, key: bytes) -> bytes | None:
        return self.strings.get(key)

    def _getrange(self, key: bytes, start: bytes, end: bytes) -> bytes:
        """Bytes ``start`` .. ``end`` (inclusive; non-negative offsets) of a string."""
        return self.strings.get(key, b"")[int(start) : int(end) + 1]

    def _set(self, key: bytes, value: bytes) -> bytes:
        self.strings[key] = value
        return b"OK"

    def _hset(self, key: bytes, *pairs: bytes) -> int:
        fields = self.hashes.setdefault(key, {})
        new = sum(field not in fields for field in pairs[::2])
        fields.update(zip(pairs[::2], pairs[1::2], strict=True))
        return new

    def _hgetall(self, key: bytes) -> dict[bytes, bytes]:
        return dict(self.hashes.get(key, {}))

    def _hmget(self, key: bytes, *fields: bytes) -> list[bytes | None] | ResponseError:
        if not fields:  # as Redis answers
            return ResponseError("wrong number of arguments for 'hmget' command")
        found = self.hashes.get(key, {})
        return [found.get(field) for field in fields]

    def _xadd(self, key: bytes, *args: bytes) -> bytes:
        at = args.index(b"*")
        entry = dict(zip(args[at + 1 :: 2], args[at + 2 :: 2], strict=True))
        self.streams.setdefault(key, []).append(entry)
        return b"%d-0" % len(self.streams[key])


_KINDS = {b"GET": "string", b"GETRANGE": "string", b"SET": "string", b"HSET": "hash", b"HGETALL": "hash",
          b"HMGET": "hash"}


def _bytes(part: object) -> bytes:
    return part if isinstance(part, bytes) else str(part).encode()
