"""Executor side of publishing: one Spark partition's pairs into Redis with pipelined writes.

Rows arrive as ``mapInArrow`` batches in which every user's rows form one contiguous run and
every row of a user is in this partition (:func:`frames.write`); each run of complete users is
sorted by ``(user_id, item_id)`` here, and a user seen again after its run is an error (the
input's order changed: nothing is switched). Rows with an inf or a nan are dropped and
counted (the publisher quarantines them afterwards); copies of a pair are resolved by
:func:`pairs.dedupe`. Per user, one ``HSET key item value ...`` and one ``EXPIRE key ttl`` go
into the buffer of the node owning the user's slot; a buffer is sent when it reaches
``pipeline_bytes``, on a sender thread while the next users are encoded (up to
:data:`SENDS_IN_FLIGHT` sends queued, so Redis has work while a batch is read and sorted).
After the partition:

* pipelined ``HLEN`` of every written key counts the fields the server holds (row-count check);
* pipelined ``HMGET`` reads back a fixed hash-chosen sample of pairs, compared byte for byte
  with what was sent and, decoded, with the input fp16 values (the round-trip check).

HSET and EXPIRE are idempotent, so Spark may retry a task and a rerun rewrites the same bytes.

Rows of the hierarchical fallback (user, item cluster) arrive with the item id
``-1 - cluster_id`` (:func:`pairs.cluster_rows_item`) and go into the same user hash as the
field ``c<cluster_id>``; they are counted apart (``cluster_*`` stats) and sampled with their
own modulus.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa

from solaris_lib.cache import pairs
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheProtocolError, PublishError
from solaris_lib.cache.format import Codec, data_key_head
from solaris_lib.cache.nodes import MAX_REDIRECTS, NodePool, make_router
from solaris_lib.cache.resp import ReplyError, pack_command

log = logging.getLogger(__name__)
SENDS_IN_FLIGHT = 4  # pipelined payloads queued on the sender thread (each ~pipeline_bytes)
STATS_SCHEMA = pa.schema([(name, pa.int64()) for name in (
    "pairs", "duplicates", "non_finite", "users", "fields_on_server", "verified", "mismatched",
    "bytes_sent", "cluster_pairs", "cluster_duplicates", "cluster_non_finite",
    "cluster_verified")] + [("seconds", pa.float64()), ("check_seconds", pa.float64())])
STATS_DDL = ", ".join(f"{f.name} {'double' if f.type == pa.float64() else 'long'}"
                      for f in STATS_SCHEMA)


@dataclass(frozen=True)
class WriteTarget:
    """Where and how a partition is written (pickled to executors)."""

    url: str
    key_prefix: str
    version: str
    codec: str
    dim: int
    ttl_s: int
    sample_modulus: int = 1000
    pipeline_bytes: int = 1 << 20
    timeout_s: float = 60.0
    cluster_sample_modulus: int = 1000


@dataclass
class _NodeBuffer:
    """Commands waiting for one node, with each user's hash tag (to re-route them)."""

    parts: list[list[bytes | memoryview]] = field(default_factory=list)  # one per user
    tags: list[bytes] = field(default_factory=list)
    size: int = 0


@dataclass
class _Sample:
    """Pairs of one user to read back: the item ids, the bytes sent, the input fp16 bytes."""

    key: bytes
    items: np.ndarray
    sent: np.ndarray
    fp16: np.ndarray


class PartitionWriter:
    """Writes one partition's sorted pairs; :meth:`finish` returns what reached the server."""

    def __init__(self, target: WriteTarget) -> None:
        self.target = target
        self.codec = Codec(target.codec, target.dim)
        self.head = data_key_head(target.key_prefix, target.version).encode()
        self.router = make_router(Endpoint.from_url(target.url))
        self.router.refresh(self._deadline())
        self.buffers: dict[NodePool, _NodeBuffer] = {}
        self.written: dict[NodePool, list[bytes]] = {}
        self.samples: dict[NodePool, list[_Sample]] = {}
        self.users_written: list[np.ndarray] = []
        self.pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solaris-write")
        self.in_flight: deque[tuple[NodePool, _NodeBuffer, int, Future]] = deque()
        self.counts = dict.fromkeys(STATS_SCHEMA.names, 0)
        self.started = time.perf_counter()

    def close(self) -> None:
        """Stop the sender thread (after its send) and close the connections."""
        self.sender.shutdown(wait=True)
        self.router.close()

    def _deadline(self) -> float:
        return time.perf_counter() + self.target.timeout_s

    def add(self, batch: pa.RecordBatch) -> None:
        """Buffer the users complete in this batch; the last user waits for the next batch."""
        fp16 = pairs.fixed_width_values(batch.column("embedding"), 2 * self.target.dim)
        finite = ~pairs.non_finite_fp16(fp16)
        all_items = batch.column("item_id").to_numpy()
        self._count("non_finite", all_items, ~finite)
        rows = (batch.column("user_id").to_numpy()[finite], all_items[finite], fp16[finite])
        if self.pending is not None:
            rows = tuple(np.concatenate([a, b]) for a, b in zip(self.pending, rows, strict=True))
        users = rows[0]
        if not len(users):
            return
        others = np.flatnonzero(users != users[-1])
        last = int(others[-1]) + 1 if len(others) else 0
        self.pending = tuple(column[last:] for column in rows)
        self._write_users(*(column[:last] for column in rows))

    def _write_users(self, users: np.ndarray, items: np.ndarray, fp16: np.ndarray) -> None:
        """Buffer the complete users of a run: (n,) users, (n,) items, (n, 2 * dim) fp16."""
        if not len(users):
            return
        users, items, fp16 = pairs.sort_runs(users, items, fp16)
        keep = pairs.dedupe(users, items, fp16)
        if not keep.all():
            self._count("duplicates", items, ~keep)
            users, items, fp16 = users[keep], items[keep], fp16[keep]
        values = self.codec.from_fp16(fp16)
        self._count("pairs", items, np.ones(len(items), dtype=bool))
        chosen = pairs.sampled(users, items, self.target.sample_modulus,
                               self.target.cluster_sample_modulus)
        starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
        ends = np.r_[starts[1:], len(users)]
        self.users_written.append(users[starts])
        self.counts["users"] += len(starts)
        tags = [str(user).encode() for user in users[starts].tolist()]  # the decimal ids
        keys = [self.head + tag + b"}" for tag in tags]  # encoded once: HSET, EXPIRE, checks
        commands = pairs.hset_pieces(keys, starts, items, values)
        sampled_runs = (np.add.reduceat(chosen, starts) > 0).tolist()
        for k, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            sample = None
            if sampled_runs[k]:
                part = np.flatnonzero(chosen[start:end]) + start
                sample = _Sample(keys[k], items[part], values[part], fp16[part])
            self._buffer_user(tags[k], keys[k], commands[k], sample)

    def _count(self, name: str, items: np.ndarray, chosen: np.ndarray) -> None:
        """Add the ``chosen`` rows to ``name`` (item rows) and ``cluster_<name>`` (cluster rows)."""
        clusters = int(np.count_nonzero(chosen & (items < 0)))
        self.counts[name] += int(np.count_nonzero(chosen)) - clusters
        self.counts[f"cluster_{name}"] += clusters

    def _buffer_user(self, tag: bytes, key: bytes, hset: list[bytes | memoryview],
                     sample: _Sample | None) -> None:
        """One user's HSET (the pieces of ``hset``) + EXPIRE of ``key`` into the buffer of the
        node owning ``tag`` (the user's decimal id), and its sampled pairs."""
        command = [*hset, pack_command("EXPIRE", key, self.target.ttl_s)]
        pool = self.router.pool_for_tag(tag)
        self.written.setdefault(pool, []).append(key)
        if sample is not None:
            self.samples.setdefault(pool, []).append(sample)
        self._append(pool, tag, command)

    def _append(self, pool: NodePool, tag: bytes, command: list[bytes | memoryview]) -> None:
        buffer = self.buffers.setdefault(pool, _NodeBuffer())
        buffer.parts.append(command)
        buffer.tags.append(tag)
        buffer.size += sum(len(piece) for piece in command)
        if buffer.size >= self.target.pipeline_bytes:
            self._flush(pool)

    def _flush(self, pool: NodePool) -> None:
        """Queue the node's buffer on the sender thread (first settling the oldest send when
        :data:`SENDS_IN_FLIGHT` are queued), so the next users are encoded while Redis runs
        these commands."""
        buffer = self.buffers.pop(pool, None)
        if buffer is None or not buffer.parts:
            return
        if len(self.in_flight) >= SENDS_IN_FLIGHT:
            self._settle_oldest()
        payload = _join(buffer.parts)
        future = self.sender.submit(pool.request, payload, 2 * len(buffer.parts),
                                    self._deadline())
        self.in_flight.append((pool, buffer, len(payload), future))

    def _settle_oldest(self) -> None:
        """Wait for the oldest send (its errors are raised here) and check its replies."""
        pool, buffer, size, future = self.in_flight.popleft()
        self._check(pool, buffer, size, future.result(), 0)

    def _settle(self) -> None:
        """Wait for every queued send and check their replies, in order."""
        while self.in_flight:
            self._settle_oldest()

    def _check(self, pool: NodePool, buffer: _NodeBuffer, size: int, replies: list,
               attempt: int) -> None:
        self.counts["bytes_sent"] += size
        errors = [r for r in replies if isinstance(r, ReplyError)]
        if not errors:
            return
        moved = str(errors[0]).startswith(("MOVED", "ASK", "TRYAGAIN"))
        if not moved or attempt >= MAX_REDIRECTS:
            raise PublishError(f"Redis at {pool.address[0]}:{pool.address[1]} refused a write: "
                               f"{errors[0]}")
        self._reroute(buffer, attempt)

    def _reroute(self, buffer: _NodeBuffer, attempt: int) -> None:
        """The cluster moved slots: reload the map and resend (HSET/EXPIRE are idempotent)."""
        self.router.refresh(self._deadline())
        targets: dict[NodePool, _NodeBuffer] = {}
        for tag, command in zip(buffer.tags, buffer.parts, strict=True):
            target = targets.setdefault(self.router.pool_for_tag(tag), _NodeBuffer())
            target.parts.append(command)
            target.tags.append(tag)
        for pool, target in targets.items():
            payload = _join(target.parts)
            replies = pool.request(payload, 2 * len(target.parts), self._deadline())
            self._check(pool, target, len(payload), replies, attempt + 1)

    def finish(self) -> pa.RecordBatch:
        """Write the last user, flush, count and read back; the partition's stats row."""
        if self.pending is not None:
            self._write_users(*self.pending)
            self.pending = None
        self._check_runs()
        for pool in list(self.buffers):
            self._flush(pool)
        self._settle()
        checking = time.perf_counter()
        for pool, keys in self.written.items():
            self.counts["fields_on_server"] += self._count_fields(pool, keys)
        for pool, samples in self.samples.items():
            self._read_back(pool, samples)
        self.counts["seconds"] = time.perf_counter() - self.started
        self.counts["check_seconds"] = time.perf_counter() - checking
        return pa.RecordBatch.from_pylist([self.counts], schema=STATS_SCHEMA)

    def _check_runs(self) -> None:
        """Every user was one run of this partition, else the counts below would be wrong."""
        if not self.users_written:
            return
        users = np.concatenate(self.users_written)
        if len(np.unique(users)) != len(users):
            raise PublishError(f"version {self.target.version}: a user's rows came to this "
                               f"task in more than one run (the input changed between the "
                               f"survey and the write?); rerun the publish")

    def _exchange(self, pool: NodePool, commands: list[bytes]) -> list:
        replies = pool.request(b"".join(commands), len(commands), self._deadline())
        errors = [r for r in replies if isinstance(r, ReplyError)]
        if errors:
            raise CacheProtocolError(f"Redis at {pool.address}: {errors[0]}")
        return replies

    def _count_fields(self, pool: NodePool, keys: list[bytes], chunk: int = 5000) -> int:
        total = 0
        for start in range(0, len(keys), chunk):
            total += sum(self._exchange(pool, [pack_command("HLEN", key)
                                               for key in keys[start : start + chunk]]))
        return total

    def _read_back(self, pool: NodePool, samples: list[_Sample]) -> None:
        commands = [pack_command("HMGET", s.key, *pairs.field_names(s.items)) for s in samples]
        for sample, stored in zip(samples, self._exchange(pool, commands), strict=True):
            sent = [row.tobytes() for row in sample.sent]
            decoded, hit, _ = self.codec.decode(stored)
            reference = np.ascontiguousarray(sample.fp16).view("<f2").astype(np.float32)
            same = (np.array([a == b for a, b in zip(stored, sent, strict=True)]) & hit
                    & (decoded == reference).all(axis=1))
            self.counts["verified"] += len(same)
            self.counts["cluster_verified"] += int(np.count_nonzero(sample.items < 0))
            self.counts["mismatched"] += len(same) - int(same.sum())


def _join(commands: list[list[bytes | memoryview]]) -> bytes:
    """One payload of the users' commands (each a list of pieces), in order."""
    return b"".join(chain.from_iterable(commands))


def write_partition(batches: Iterator[pa.RecordBatch], target: WriteTarget
                    ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` entry point: write every batch, then yield one row of stats."""
    writer = PartitionWriter(target)
    try:
        for batch in batches:
            writer.add(batch)
        stats = writer.finish()
    finally:
        writer.close()
    log.info("partition written: %s", stats.to_pylist()[0])
    yield stats
