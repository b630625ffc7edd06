"""Which node holds a key, and a pool of ready connections per node.

:class:`SingleRouter` serves one server; :class:`ClusterRouter` keeps Redis Cluster's slot map
(from ``CLUSTER SLOTS``), learns from ``MOVED`` replies, and follows ``ASK`` once. Keys are routed
by their hash tag (the user id for data keys), hashed with CRC16 like the server does.
"""

from __future__ import annotations

import functools
import logging
import ssl
import threading
from binascii import crc_hqx
from collections import deque

import numpy as np

from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import (
    CacheConnectionError,
    CacheError,
    CacheProtocolError,
    CacheUnavailableError,
)
from solaris_lib.cache.memory import decimal_digits
from solaris_lib.cache.resp import Connection, ReplyError, pack_command

log = logging.getLogger(__name__)
SLOTS = 16384
MAX_REDIRECTS = 2


def key_slot(tag: bytes) -> int:
    """Redis Cluster slot of a key whose hash tag (or whole name, without braces) is ``tag``."""
    return crc_hqx(tag, 0) % SLOTS


@functools.cache
def _crc_table() -> np.ndarray:
    """(256,) uint16 CRC-16/XMODEM (``crc_hqx``) of every byte value: the table of the
    byte-wise CRC, built on first use and cached (importing this module builds nothing);
    read-only, since every caller shares the one array."""
    table = np.array([crc_hqx(bytes([b]), 0) for b in range(256)], dtype=np.uint16)
    table.flags.writeable = False
    return table


def user_slots(users: np.ndarray) -> np.ndarray:
    """(u,) int64 slot of each user id's keys (its decimal digits are the hash tag):
    :func:`key_slot` vectorised, one table step per digit position (negative ids, which are
    never published but are surveyed, one by one)."""
    users = np.asarray(users, dtype=np.int64)
    negative = users < 0
    rest = np.where(negative, 0, users)
    length = decimal_digits(rest)
    digits = []  # ASCII digits, lowest place first
    for _ in range(int(length.max(initial=0))):
        digits.append((rest % 10).astype(np.uint8) + np.uint8(ord("0")))
        rest = rest // 10
    table = _crc_table()
    crc = np.zeros(len(users), np.uint16)
    for place in range(len(digits) - 1, -1, -1):  # a user's bytes start at its highest place
        index = (crc >> np.uint16(8)).astype(np.uint8) ^ digits[place]
        step = (crc << np.uint16(8)) ^ table[index]
        crc = np.where(length > place, step, crc)
    slots = crc.astype(np.int64) % SLOTS
    for at in np.flatnonzero(negative).tolist():
        slots[at] = key_slot(str(int(users[at])).encode())
    return slots


def hash_tag(key: str | bytes) -> bytes:
    """What Redis Cluster hashes for ``key``: the first non-empty ``{...}``, else the key."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            return data[start + 1 : end]
    return data


class NodePool:
    """Idle connections to one node; ``acquire`` reuses one or connects within the deadline."""

    def __init__(self, address: tuple[str, int], endpoint: Endpoint,
                 tls_context: ssl.SSLContext | None, max_idle: int = 32) -> None:
        self.address = address
        self._endpoint = endpoint
        self._tls = tls_context
        self._idle: deque[Connection] = deque()
        self._lock = threading.Lock()
        self._max_idle = max_idle

    def acquire(self, deadline: float) -> Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Connection.open(self.address, self._endpoint, deadline, self._tls)

    def release(self, connection: Connection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def request(self, payload: bytes, replies: int, deadline: float) -> list:
        """One pipelined exchange on a pooled connection; a failed connection is discarded."""
        connection = self.acquire(deadline)
        try:
            result = connection.request(payload, replies, deadline)
        except CacheError:
            connection.close()
            raise
        self.release(connection)
        return result

    def close(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle), deque()
        for connection in idle:
            connection.close()


class SingleRouter:
    """Every key lives on the one server of the URL."""

    cluster = False
    stale = False

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        context = endpoint.tls.context() if endpoint.tls else None
        self.pool = NodePool(endpoint.nodes[0], endpoint, context)

    def pool_for_tag(self, tag: bytes) -> NodePool:
        return self.pool

    def pool_for_slot(self, slot: int) -> NodePool:
        return self.pool

    def pools(self) -> list[NodePool]:
        return [self.pool]

    def refresh(self, deadline: float) -> None:
        """Nothing to learn for one server; a PING proves it answers."""
        reply = self.pool.request(pack_command("PING"), 1, deadline)[0]
        if isinstance(reply, ReplyError):
            raise CacheConnectionError(f"PING refused: {reply}")

    def execute(self, tag: bytes, payload: bytes, replies: int, deadline: float) -> list:
        return self.pool.request(payload, replies, deadline)

    def close(self) -> None:
        self.pool.close()


class ClusterRouter:
    """Routes keys to Redis Cluster masters by slot; the slot map is loaded by :meth:`refresh`."""

    cluster = True

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._tls = endpoint.tls.context() if endpoint.tls else None
        self._pools: dict[tuple[str, int], NodePool] = {}
        self._slots: list[NodePool | None] = [None] * SLOTS
        self._lock = threading.Lock()
        self.stale = True

    def _pool(self, address: tuple[str, int]) -> NodePool:
        with self._lock:
            pool = self._pools.get(address)
            if pool is None:
                pool = self._pools[address] = NodePool(address, self.endpoint, self._tls)
            return pool

    def pools(self) -> list[NodePool]:
        """The pools of the masters that own slots (each once)."""
        return list({id(p): p for p in self._slots if p is not None}.values())

    def refresh(self, deadline: float) -> None:
        """Reload the slot map from the first known node that answers ``CLUSTER SLOTS``."""
        candidates = [p.address for p in self.pools()] + list(self.endpoint.nodes)
        last: CacheError | None = None
        for address in dict.fromkeys(candidates):
            try:
                command = pack_command("CLUSTER", "SLOTS")
                reply = self._pool(address).request(command, 1, deadline)[0]
            except CacheUnavailableError as exc:
                last = exc
                continue
            if isinstance(reply, ReplyError):
                raise CacheProtocolError(f"CLUSTER SLOTS failed on {address}: {reply}")
            self._apply_slots(reply, address[0])
            return
        raise last or CacheConnectionError("no cluster node to ask for the slot map")

    def _apply_slots(self, reply: list, fallback_host: str) -> None:
        table: list[NodePool | None] = [None] * SLOTS
        for start, end, master, *_replicas in reply:
            host = master[0].decode() if master[0] else fallback_host
            pool = self._pool((host, int(master[1])))
            for slot in range(int(start), int(end) + 1):
                table[slot] = pool
        self._slots = table
        self.stale = any(p is None for p in table)

    def pool_for_tag(self, tag: bytes) -> NodePool:
        return self.pool_for_slot(key_slot(tag))

    def pool_for_slot(self, slot: int) -> NodePool:
        pool = self._slots[slot]
        if pool is None:
            self.stale = True
            raise CacheConnectionError(f"no known master for slot {slot} (map not loaded)")
        return pool

    def execute(self, tag: bytes, payload: bytes, replies: int, deadline: float) -> list:
        """Run a pipeline whose keys all hash to ``tag``, following MOVED/ASK (at most twice)."""
        pool = self.pool_for_tag(tag)
        asking = 0
        for _ in range(MAX_REDIRECTS + 1):
            prefix = pack_command("ASKING") if asking else b""
            result = pool.request(prefix + payload, replies + asking, deadline)[asking:]
            redirect = _redirect(result)
            if redirect is None:
                return result
            kind, slot, address = redirect
            pool = self._pool(address)
            asking = int(kind == "ASK")
            if kind == "MOVED":
                self._slots[slot] = pool
                self.stale = True
        raise CacheProtocolError(f"too many cluster redirects for hash tag {tag!r}")

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()


def _redirect(result: list) -> tuple[str, int, tuple[str, int]] | None:
    """``("MOVED"|"ASK", slot, (host, port))`` when a reply redirects, else None."""
    for reply in result:
        if isinstance(reply, ReplyError):
            kind, _, rest = str(reply).partition(" ")
            if kind in ("MOVED", "ASK"):
                slot, address = rest.split(" ", 1)
                host, _, port = address.rpartition(":")
                return kind, int(slot), (host, int(port))
    return None


def make_router(endpoint: Endpoint) -> SingleRouter | ClusterRouter:
    """The router for ``endpoint`` (cluster mode comes from the URL scheme)."""
    return ClusterRouter(endpoint) if endpoint.cluster else SingleRouter(endpoint)
