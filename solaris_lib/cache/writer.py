"""Executor side of publishing: one task's rows into their user hashes with pipelined writes.

Rows arrive as (user, field id, fp16 embedding) arrays in which every user's rows form one
contiguous run and every row of a user is in this task; a user seen again after its run is an
error (the input changed under the publish: nothing is switched). Rows with an inf or a nan
are dropped and counted; copies of a pair are resolved by :func:`pairs.dedupe`. The rows of
each complete user are sorted by (key, field id) and each of the user's keys
(``docs/cache-format.md``: a bucket hash per bucket of its items, or its one cluster hash)
gets ``HSET key field value ...`` (in HSETs of at most :data:`MAX_FIELDS_PER_HSET` fields, so a
user with a million pairs is written in bounded commands and sends), ``EXPIRE key ttl NX``,
``EXPIRE key ttl GT`` and ``HLEN key`` in the buffer of the master owning the user's slot: the
HLEN replies count the fields the server holds (the row-count check). The two EXPIREs give a
new key (or one a failed run left) the version's TTL but never shorten a key that a publish
retained (a served or failover version's, :data:`format.RETAINED_TTL_S`): a late or zombie
writer of a served version cannot make it expire. A buffer is sent (on a sender thread, while the next users are encoded; at
most :data:`SENDS_IN_FLIGHT` queued) when it reaches ``pipeline_bytes``, over redis-py
connections (:mod:`connection`). After the task, pipelined ``HMGET`` reads back a fixed
hash-chosen sample of pairs, compared byte for byte with what was sent and, decoded, with the
input fp16 values (the round-trip check).

HSET and EXPIRE are idempotent, so Spark may retry a task and a rerun rewrites the same bytes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa
from redis.exceptions import AskError, ResponseError, TryAgainError

from solaris_lib.cache import pairs
from solaris_lib.cache.connection import (
    ASKING,
    MAX_REDIRECTS,
    Nodes,
    asked_node,
    send_asking,
    send_packed,
)
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheProtocolError, PublishError
from solaris_lib.cache.format import CLUSTER_KEY, Codec, bucket_of, user_key_head

log = logging.getLogger(__name__)
SENDS_IN_FLIGHT = 4  # pipelined payloads queued on the sender thread (each ~pipeline_bytes)
MAX_FIELDS_PER_HSET = 1000  # a key's fields go in HSETs of at most this many (giant users)
STATS_NAMES = ("pairs", "duplicates", "non_finite", "users", "keys", "fields_on_server",
               "verified", "mismatched", "bytes_sent")
STATS_SCHEMA = pa.schema([(name, pa.int64()) for name in STATS_NAMES]
                         + [("seconds", pa.float64()), ("check_seconds", pa.float64())])


@dataclass(frozen=True)
class WriteTarget:
    """Where and how a task writes (pickled to executors). ``buckets``: the bucket hashes per
    user of exact rows; 0 writes every user's rows into its one cluster hash."""

    url: str
    key_prefix: str
    version: str
    dim: int
    ttl_s: int
    buckets: int
    sample_modulus: int = 1000
    pipeline_bytes: int = 1 << 20
    timeout_s: float = 60.0


Command = list[bytes | memoryview]  # one packed command, as the pieces that joined make it


@dataclass
class _NodeBuffer:
    """Commands waiting for one master, in groups on one key each, with each group's user's
    hash tag (to re-route them). ``asking``: every command goes after an ``ASKING`` (the
    keys' slot is being imported by this master: its source answered ``-ASK``)."""

    groups: list[list[Command]] = field(default_factory=list)  # commands on one key
    tags: list[str] = field(default_factory=list)
    counted: list[bool] = field(default_factory=list)  # the group ends with the key's HLEN
    asking: bool = False
    size: int = 0

    def add(self, tag: str, commands: list[Command], counted: bool) -> None:
        self.groups.append(commands)
        self.tags.append(tag)
        self.counted.append(counted)
        self.size += sum(len(piece) for command in commands for piece in command)

    def replies(self) -> list[int]:
        """The replies of each group (an ASKING's included)."""
        per = 2 if self.asking else 1
        return [per * len(commands) for commands in self.groups]

    def payload(self) -> bytes:
        """Every group's commands in order, each after an ``ASKING`` when ``asking``."""
        commands = chain.from_iterable(self.groups)
        if self.asking:
            commands = ((ASKING, *command) for command in commands)
        return b"".join(chain.from_iterable(commands))


@dataclass
class _Sample:
    """Pairs of one key to read back: the field ids, the bytes sent (= the input fp16)."""

    key: bytes
    items: np.ndarray
    sent: np.ndarray


class PartitionWriter:
    """Writes one task's rows; :meth:`finish` returns what reached the server."""

    def __init__(self, target: WriteTarget) -> None:
        self.target = target
        self.codec = Codec("fp16", target.dim)
        self.head = user_key_head(target.key_prefix, target.version).encode()
        self.nodes = Nodes(Endpoint.from_url(target.url), target.timeout_s)
        self.buffers: dict[str, _NodeBuffer] = {}
        self.samples: dict[str, list[_Sample]] = {}
        self.users_written: list[np.ndarray] = []
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # the last user's
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solaris-write")
        self.in_flight: deque[tuple[str, _NodeBuffer, int, Future]] = deque()
        self.counts = dict.fromkeys(STATS_SCHEMA.names, 0)
        self.started = time.perf_counter()

    def close(self) -> None:
        """Stop the sender thread (after its send) and close the connections."""
        self.sender.shutdown(wait=True)
        self.nodes.close()

    def add(self, users: np.ndarray, items: np.ndarray, fp16: np.ndarray) -> None:
        """Buffer the users complete in these rows: (n,) users and field ids, (n, 2 * dim)
        uint8 fp16 values; the last user waits for the next call."""
        finite = ~pairs.non_finite_fp16(fp16)
        self.counts["non_finite"] += int(np.count_nonzero(~finite))
        rows = (users[finite], items[finite], fp16[finite])
        if not len(rows[0]):
            return
        if self.pending and (rows[0] == self.pending[0][0][0]).all():
            self.pending.append(rows)  # a giant user's rows: joined once, when it ends
            return
        if self.pending:
            rows = tuple(np.concatenate(parts) for parts in zip(*self.pending, rows, strict=True))
        others = np.flatnonzero(rows[0] != rows[0][-1])
        last = int(others[-1]) + 1 if len(others) else 0
        self.pending = [tuple(column[last:] for column in rows)]
        self._write_users(*(column[:last] for column in rows))

    def _key_parts(self, items: np.ndarray) -> np.ndarray:
        if self.target.buckets:
            return bucket_of(items, self.target.buckets)
        return np.zeros(len(items), np.int64)

    def _write_users(self, users: np.ndarray, items: np.ndarray, fp16: np.ndarray) -> None:
        """Buffer the complete users of a run: (n,) users, (n,) field ids, (n, 2 * dim) fp16."""
        if not len(users):
            return
        parts = self._key_parts(items)
        order = pairs.key_order(users, parts, items)
        if order is not None:
            users, parts, items, fp16 = users[order], parts[order], items[order], fp16[order]
        keep = pairs.dedupe(users, items, fp16)
        if not keep.all():
            self.counts["duplicates"] += int(np.count_nonzero(~keep))
            users, parts, items, fp16 = users[keep], parts[keep], items[keep], fp16[keep]
        self.counts["pairs"] += len(items)
        user_starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
        self.users_written.append(users[user_starts])
        self.counts["users"] += len(user_starts)
        starts = np.flatnonzero(np.r_[True, (users[1:] != users[:-1]) | (parts[1:] != parts[:-1])])
        self.counts["keys"] += len(starts)
        tags = [str(u) for u in users[starts].tolist()]  # the decimal ids: the hash tags
        tails = parts[starts].tolist() if self.target.buckets else [CLUSTER_KEY] * len(tags)
        keys = [b"%s%s}:%s" % (self.head, tag.encode(), str(tail).encode())
                for tag, tail in zip(tags, tails, strict=True)]
        ends = np.r_[starts[1:], len(users)]
        batches = -(-(ends - starts) // MAX_FIELDS_PER_HSET)  # HSETs per key, bounded
        owner = np.repeat(np.arange(len(starts)), batches)
        first = np.r_[0, np.cumsum(batches)[:-1]]
        sub_starts = starts[owner] + (np.arange(len(owner)) - first[owner]) * MAX_FIELDS_PER_HSET
        commands = pairs.hset_pieces([keys[k] for k in owner.tolist()], sub_starts, items, fp16)
        chosen = pairs.sampled(users, items, self.target.sample_modulus)
        sampled = np.flatnonzero(np.add.reduceat(chosen, starts) > 0).tolist()
        samples = {k: _Sample(keys[k], items[rows], fp16[rows]) for k in sampled
                   for rows in [np.flatnonzero(chosen[starts[k]:ends[k]]) + starts[k]]}
        ttl = b"$%d\r\n%d\r\n" % (len(str(self.target.ttl_s)), self.target.ttl_s)
        for k, (tag, key) in enumerate(zip(tags, keys, strict=True)):
            name = b"$%d\r\n%s\r\n" % (len(key), key)
            tail = [[b"*4\r\n$6\r\nEXPIRE\r\n%s%s$2\r\nNX\r\n" % (name, ttl)],
                    [b"*4\r\n$6\r\nEXPIRE\r\n%s%s$2\r\nGT\r\n" % (name, ttl)],
                    [b"*2\r\n$4\r\nHLEN\r\n%s" % name]]
            node = self.nodes.node_for_tag(tag)
            if k in samples:
                self.samples.setdefault(node, []).append(samples[k])
            hsets = commands[first[k]:first[k] + batches[k]]
            for hset in hsets[:-1]:
                self._buffer(node, tag, [hset], False)
            self._buffer(node, tag, [hsets[-1], *tail], True)

    def _buffer(self, node: str, tag: str, commands: list[Command], counted: bool) -> None:
        """Commands on one key (``counted``: the last is the key's HLEN) into the buffer of
        ``node``, the master owning ``tag`` (the user's decimal id); sent when the buffer
        reaches ``pipeline_bytes``."""
        buffer = self.buffers.setdefault(node, _NodeBuffer())
        buffer.add(tag, commands, counted)
        if buffer.size >= self.target.pipeline_bytes:
            self._flush(node)

    def _flush(self, node: str) -> None:
        """Queue the master's buffer on the sender thread (first settling the oldest send when
        :data:`SENDS_IN_FLIGHT` are queued), so the next users are encoded while Redis runs
        these commands."""
        buffer = self.buffers.pop(node, None)
        if buffer is None or not buffer.groups:
            return
        if len(self.in_flight) >= SENDS_IN_FLIGHT:
            self._settle_oldest()
        payload = buffer.payload()
        future = self.sender.submit(send_packed, self.nodes.pool(node), [payload],
                                    sum(buffer.replies()))
        self.in_flight.append((node, buffer, len(payload), future))

    def _settle_oldest(self) -> None:
        """Wait for the oldest send (its errors are raised here) and check its replies."""
        node, buffer, size, future = self.in_flight.popleft()
        self._check(node, buffer, size, future.result(), 0)

    def _check(self, node: str, buffer: _NodeBuffer, size: int, replies: list,
               attempt: int) -> None:
        self.counts["bytes_sent"] += size
        ends = np.cumsum(buffer.replies()).tolist()  # each group's last reply: HLEN if counted
        if not any(isinstance(r, ResponseError) for r in replies):
            self.counts["fields_on_server"] += sum(
                replies[end - 1] for end, counted in zip(ends, buffer.counted, strict=True)
                if counted)
            return
        redirected: list[tuple[int, str | None]] = []  # (group, the node an -ASK names)
        for k, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
            group = replies[start:end]
            errors = [r for r in group if isinstance(r, ResponseError)]
            if not errors:
                self.counts["fields_on_server"] += group[-1] if buffer.counted[k] else 0
                continue
            refused = next((e for e in errors if not isinstance(e, AskError | TryAgainError)),
                           None)
            if refused is not None or attempt >= MAX_REDIRECTS:
                raise PublishError(f"Redis at {node} refused a write: {refused or errors[0]}")
            redirected.append((k, asked_node(group)))
        self._reroute(buffer, redirected, attempt)

    def _reroute(self, buffer: _NodeBuffer, redirected: list[tuple[int, str | None]],
                 attempt: int) -> None:
        """Slots moved or are moving: each ``redirected`` group (``(index, node)``) answered
        ``-ASK`` goes to the importing master ``node`` after ``ASKING`` (the slot map still
        names the source until the migration ends), one answered ``-MOVED`` or ``-TRYAGAIN``
        to its owner by the reloaded map; resent whole (HSET, EXPIRE NX/GT and HLEN are
        idempotent)."""
        if not all(node for _, node in redirected):
            self.nodes.refresh()
        targets: dict[tuple[str, bool], _NodeBuffer] = {}
        for k, asked in redirected:
            tag = buffer.tags[k]
            route = (asked, True) if asked else (self.nodes.node_for_tag(tag), False)
            target = targets.setdefault(route, _NodeBuffer(asking=route[1]))
            target.add(tag, buffer.groups[k], buffer.counted[k])
        for (node, _), target in targets.items():
            payload = target.payload()
            answers = send_packed(self.nodes.pool(node), [payload], sum(target.replies()))
            self._check(node, target, len(payload), answers, attempt + 1)

    def finish(self) -> dict:
        """Write the last user, flush, count and read back; the task's stats."""
        if self.pending:
            self._write_users(*(np.concatenate(parts) for parts in zip(*self.pending,
                                                                       strict=True)))
            self.pending = []
        self._check_runs()
        for node in list(self.buffers):
            self._flush(node)
        while self.in_flight:
            self._settle_oldest()
        checking = time.perf_counter()
        for node, samples in self.samples.items():
            self._read_back(node, samples)
        self.counts["seconds"] = time.perf_counter() - self.started
        self.counts["check_seconds"] = time.perf_counter() - checking
        return dict(self.counts)

    def _check_runs(self) -> None:
        """Every user was one run of this task, else the counts below would be wrong."""
        if not self.users_written:
            return
        users = np.concatenate(self.users_written)
        if len(np.unique(users)) != len(users):
            raise PublishError(f"version {self.target.version}: a user's rows came to this "
                               f"task in more than one run (the input changed between the "
                               f"survey and the write?); rerun the publish")

    def _read_back(self, node: str, samples: list[_Sample], asking: bool = False,
                   attempt: int = 0) -> None:
        """Read the samples of ``node`` back and compare them; a sample answered ``-ASK`` or
        ``-MOVED`` is read again where the cluster points (at most MAX_REDIRECTS times)."""
        commands = [("HMGET", s.key, *s.items.tolist()) for s in samples]
        replies = send_asking(self.nodes.pool(node), commands, asking)
        moved: dict[tuple[str, bool], list[_Sample]] = {}
        refreshed = False
        for sample, stored in zip(samples, replies, strict=True):
            if not isinstance(stored, ResponseError):
                self._compare(sample, stored)
                continue
            if not isinstance(stored, AskError | TryAgainError) or attempt >= MAX_REDIRECTS:
                raise CacheProtocolError(f"Redis at {node}: {stored}")
            ask = asked_node([stored])
            if ask is None and not refreshed:
                self.nodes.refresh()
                refreshed = True
            route = (ask, True) if ask else (self.nodes.node_for_tag(sample.key.decode()), False)
            moved.setdefault(route, []).append(sample)
        for (target, ask), redo in moved.items():
            self._read_back(target, redo, ask, attempt + 1)

    def _compare(self, sample: _Sample, stored: list) -> None:
        """Count one sample's pairs read back: equal bytes and, decoded, equal values."""
        sent = [row.tobytes() for row in sample.sent]
        decoded, hit, _ = self.codec.decode(stored)
        reference = np.ascontiguousarray(sample.sent).view("<f2").astype(np.float32)
        same = (np.array([a == b for a, b in zip(stored, sent, strict=True)]) & hit
                & (decoded == reference).all(axis=1))
        self.counts["verified"] += len(same)
        self.counts["mismatched"] += len(same) - int(same.sum())


def write_rows(batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
               target: WriteTarget) -> dict:
    """Write every (users, field ids, fp16 values) batch, then return the stats."""
    writer = PartitionWriter(target)
    try:
        for users, items, values in batches:
            writer.add(users, items, values)
        stats = writer.finish()
    finally:
        writer.close()
    log.info("task written: %s", stats)
    return stats
