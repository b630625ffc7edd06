"""The publisher's first pass over a table: row problems, content digest, memory per slot.

Each Spark task gets a few :class:`slices.Slice` s of the table's parquet files, reads them with
pyarrow (:func:`slices.owned_batches`) and returns a :class:`TaskSurvey`:

* rows per problem code (:func:`rows.row_codes`);
* per (model version, embedding length) of the rows without one: rows, the digest parts (the
  XXH64 row hash of :mod:`rowhash`) and, per slice, the sorted user ids with whether each
  user's rows are one run there, and the estimated Redis bytes of the users' hashes per
  cluster slot (the hashes as this slice's rows make them: a user whose rows lie in several
  slices is estimated once per slice, an overestimate of the rare scattered user).

The driver merges the tasks (:func:`merge`): the groups :func:`rows.interpret` reads, the
scattered users (rows in more than one slice, or not one run of their slice) and the memory
per slot of every group.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa
from redis.crc import key_slot

from solaris_lib.cache import memory
from solaris_lib.cache.format import CLUSTER_KEY, bucket_of
from solaris_lib.cache.pairs import fixed_width_values
from solaris_lib.cache.rowhash import digest_parts, row_hash
from solaris_lib.cache.rows import EXACT, Table, ids, plain, row_codes
from solaris_lib.cache.slices import Slice, owned_batches


@dataclass(frozen=True)
class Layout:
    """How a table's rows become hashes: ``buckets`` per user (exact rows) or one cluster key,
    ``key_head`` bytes before the user id in every key name, the server's listpack limits."""

    table: Table
    buckets: int
    key_head: int
    limits: memory.HashLimits

    def key_parts(self, user_ids: np.ndarray, field_ids: np.ndarray) -> np.ndarray:
        """(n,) int64 part of each row's key after the user (its bucket; 0 for cluster rows)."""
        if self.table == EXACT:
            return bucket_of(field_ids, self.buckets)
        return np.zeros(len(user_ids), np.int64)

    def key_lengths(self, user_ids: np.ndarray, parts: np.ndarray) -> np.ndarray:
        """(k,) bytes of the key names ``head + user + "}:" + part``."""
        tail = (memory.decimal_digits(parts) if self.table == EXACT
                else np.full(len(parts), len(CLUSTER_KEY)))
        return self.key_head + memory.decimal_digits(user_ids) + 2 + tail


@dataclass
class GroupPart:
    """One (model version, embedding length) group of rows without a problem, in one task."""

    rows: int = 0
    low: int = 0
    xor: int = 0
    users: list[np.ndarray] = field(default_factory=list)  # per slice: sorted user ids
    runs: list[np.ndarray] = field(default_factory=list)  # per slice: (u,) one run there
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (s,) ids
    bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (s,)
    keys: int = 0
    listpack_keys: int = 0


@dataclass
class TaskSurvey:
    """What one task found: rows per problem code and the groups of clean rows."""

    problems: np.ndarray
    groups: dict[tuple[str, int], GroupPart]
    seconds: float = 0.0


def survey_task(pieces: Iterable[list[Slice]], layout: Layout) -> TaskSurvey:
    """The survey of one task's slices (``pieces``: lists of slices)."""
    started = time.perf_counter()
    table = layout.table
    problems = np.zeros(len(table.problems), np.int64)
    groups: dict[tuple[str, int], GroupPart] = {}
    columns = list(table.columns)
    for piece in chain.from_iterable(pieces):
        found: dict[tuple[str, int], list[tuple[np.ndarray, ...]]] = {}
        position = 0
        for batch in map(plain, owned_batches(piece, columns)):
            codes, lengths = row_codes(batch, table)
            problems += np.bincount(codes, minlength=len(problems))
            _clean_rows(batch, table, codes == 0, lengths, position, groups, found)
            position += batch.num_rows
        for key, parts in found.items():
            _add_slice(groups[key], [np.concatenate(c) for c in zip(*parts, strict=True)],
                       key[1], layout)
    return TaskSurvey(problems, groups, time.perf_counter() - started)


def _clean_rows(batch: pa.RecordBatch, table: Table, clean: np.ndarray, lengths: np.ndarray,
                position: int, groups: dict, found: dict) -> None:
    """Add the batch's rows without a problem to their (model version, length) groups."""
    if not clean.any():
        return
    versions = batch.column("model_version").dictionary_encode()
    codes = versions.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    names = versions.dictionary.to_pylist()
    users, field_ids = ids(batch, "user_id"), ids(batch, table.id_column)
    for code, width, chosen in _clean_groups(codes, lengths, clean):
        embedding = batch.column("embedding")
        if len(chosen) != batch.num_rows:
            embedding = embedding.take(chosen)
        low, xor = digest_parts(row_hash(users[chosen], field_ids[chosen],
                                         fixed_width_values(embedding, width)))
        part = groups.setdefault((names[code], width), GroupPart())
        part.rows += len(chosen)
        part.low, part.xor = part.low + low, part.xor ^ xor  # interpret() takes them mod 2^64
        found.setdefault((names[code], width), []).append(
            (users[chosen], field_ids[chosen], position + chosen))


def _clean_groups(versions: np.ndarray, lengths: np.ndarray, clean: np.ndarray
                  ) -> Iterator[tuple[int, int, np.ndarray]]:
    """(version code, length, (k,) row indices) of each group of the clean rows (usually
    one: the checks avoid sorting)."""
    rows = np.flatnonzero(clean)
    for code in _distinct(versions[rows]):
        same = rows[versions[rows] == code]
        for width in _distinct(lengths[same]):
            yield code, width, same[lengths[same] == width]


def _distinct(values: np.ndarray) -> list[int]:
    if values.min() == values.max():
        return [int(values[0])]
    return np.unique(values).tolist()


def _add_slice(part: GroupPart, rows: list[np.ndarray], width: int, layout: Layout) -> None:
    """One slice's rows of a group (users, field ids, positions (n,)): its users, whether
    each is one run, and the estimated bytes of their hashes per slot."""
    users, field_ids, positions = rows
    order = np.lexsort((positions, users))
    users, field_ids, positions = users[order], field_ids[order], positions[order]
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    unique = users[starts]
    counts = np.diff(np.r_[starts, len(users)])
    first, last = positions[starts], np.maximum.reduceat(positions, starts)
    part.users.append(unique)
    part.runs.append(last - first + 1 == counts)
    parts = layout.key_parts(users, field_ids)
    key_order = np.lexsort((parts, users))
    key_users, key_parts = users[key_order], parts[key_order]
    key_starts = np.flatnonzero(np.r_[True, (key_users[1:] != key_users[:-1])
                                      | (key_parts[1:] != key_parts[:-1])])
    fields = np.diff(np.r_[key_starts, len(key_users)])
    sorted_ids = field_ids[key_order]
    lp = np.add.reduceat(memory.listpack_int_bytes(sorted_ids), key_starts)
    ht = np.add.reduceat(memory.hashtable_field_bytes(sorted_ids), key_starts)
    owners = key_users[key_starts]
    size = memory.hash_bytes(fields, lp, ht, width, layout.key_lengths(
        owners, key_parts[key_starts]), layout.limits)
    user_slot = np.array([key_slot(str(u).encode()) for u in unique.tolist()], np.int64)
    slots = user_slot[np.searchsorted(unique, owners)]
    part.slots, part.bytes = _add_sparse(part.slots, part.bytes, slots, size)
    part.keys += len(fields)
    part.listpack_keys += int(np.count_nonzero(memory.is_listpack(fields, width,
                                                                  layout.limits)))


def _add_sparse(slots: np.ndarray, sums: np.ndarray, more_slots: np.ndarray,
                more: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-slot sums (sorted slot ids, sums) with ``more`` added per ``more_slots``."""
    present, index = np.unique(np.r_[slots, more_slots], return_inverse=True)
    total = np.zeros(len(present), np.int64)
    np.add.at(total, index, np.r_[sums, more].astype(np.int64))
    return present, total


@dataclass
class Merged:
    """The tasks' surveys merged: the groups :func:`rows.interpret` reads and, per (model
    version, length) of clean rows, the scattered users and the estimate per slot."""

    groups: list[dict]
    parts: dict[tuple[str, int], GroupPart]
    scattered: dict[tuple[str, int], np.ndarray]
    task_seconds: float = 0.0


def merge(tasks: Iterable[TaskSurvey], table: Table) -> Merged:
    """Sum the tasks' counts, digest parts and estimates; find each group's scattered users
    (sorted int64 ids: rows in more than one slice, or not one run of their slice)."""
    tasks = list(tasks)
    problems = sum((t.problems for t in tasks), np.zeros(len(table.problems), np.int64))
    groups = [{"reason": table.problems[code], "model_version": None, "bytes": None,
               "rows": int(problems[code]), "low": 0, "xor": 0, "scattered": 0}
              for code in range(1, len(problems)) if problems[code]]
    parts: dict[tuple[str, int], GroupPart] = {}
    scattered: dict[tuple[str, int], np.ndarray] = {}
    for key in sorted({k for t in tasks for k in t.groups}):
        found = [t.groups[key] for t in tasks if key in t.groups]
        total = parts[key] = GroupPart()
        for part in found:
            total.rows += part.rows
            total.low, total.xor = total.low + part.low, total.xor ^ part.xor
            total.slots, total.bytes = _add_sparse(total.slots, total.bytes, part.slots,
                                                   part.bytes)
            total.keys += part.keys
            total.listpack_keys += part.listpack_keys
        users = np.concatenate([u for p in found for u in p.users])
        runs = np.concatenate([r for p in found for r in p.runs])
        unique, index, seen = np.unique(users, return_inverse=True, return_counts=True)
        broken = np.zeros(len(unique), bool)
        broken[index[~runs]] = True
        scattered[key] = unique[(seen > 1) | broken]
        total.users = [unique]
        groups.append({"reason": None, "model_version": key[0], "bytes": key[1],
                       "rows": total.rows, "low": total.low, "xor": total.xor,
                       "scattered": len(scattered[key])})
    return Merged(groups, parts, scattered, max((t.seconds for t in tasks), default=0.0))
