"""The direct read path's numpy work: survey and write slices of parquet files (no Spark SQL).

Each Spark task gets a few :class:`slices.Slice` s, reads their rows with pyarrow
(:func:`slices.owned_batches`) and does here what Spark SQL does on the JVM path
(:mod:`validate`, :mod:`frames`), with the same results:

* :func:`row_reasons`: each row's first problem, in :func:`validate.row_problem`'s order;
* :func:`survey_task`: rows per problem, and per (model version, embedding length) of the
  rows without one: the digest parts (Spark's ``xxhash64`` by :mod:`rowhash`) and per user
  the rows, item-id sizes (listpack and hashtable bytes) and first and last position in the
  slice. The driver merges the tasks' parts (:func:`merge`) into the groups that
  :func:`validate.interpret` reads (so the same :class:`validate.Survey`), the memory
  estimate per slot (:func:`slot_estimates`, as :func:`frames.tally`) and the users whose
  rows are not one run of one slice (:func:`all_scattered_users`);
* :func:`write_task`: the publishable rows of users that are not scattered, in file order,
  into a :class:`writer.PartitionWriter`.

The per-user parts travel to the driver: seven int64 (56 bytes) per (user, group) and slice,
about 56 MB per million users (the Spark SQL path keeps them in the executors).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris_lib.cache import memory
from solaris_lib.cache.nodes import user_slots
from solaris_lib.cache.pairs import fixed_width_values
from solaris_lib.cache.rowhash import digest_parts, row_hash
from solaris_lib.cache.slices import Slice, owned_batches
from solaris_lib.cache.validate import REASON, REASONS, Survey
from solaris_lib.cache.writer import PartitionWriter, WriteTarget

COLUMNS = ("user_id", "item_id", "model_version", "embedding")
# code -> reason of validate.row_problem (0: none), in the order it tests them (the writer
# finds non-finite values)
PROBLEMS = (None, *(r for r in REASONS if r != "non_finite_embedding"))
_USER_FIELDS = ("user", "rows", "lp", "ht", "first", "last", "pieces")


def row_reasons(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, lengths)``: (n,) int8 index into :data:`PROBLEMS` of each row's first
    problem, and (n,) int64 embedding bytes (-1 when null)."""
    lengths = pc.fill_null(pc.binary_length(batch.column("embedding")), -1)
    lengths = lengths.to_numpy(zero_copy_only=False).astype(np.int64)
    checks = [_is_null(batch, "user_id"), _negative(batch, "user_id"),
              _is_null(batch, "item_id"), _negative(batch, "item_id"), lengths < 0,
              (lengths == 0) | (lengths % 2 == 1), _is_null(batch, "model_version")]
    codes = np.zeros(batch.num_rows, np.int8)
    for code in range(len(checks), 0, -1):  # the first problem wins
        codes[checks[code - 1]] = code
    return codes, lengths


def _is_null(batch: pa.RecordBatch, name: str) -> np.ndarray:
    return batch.column(name).is_null().to_numpy(zero_copy_only=False)


def _negative(batch: pa.RecordBatch, name: str) -> np.ndarray:
    return _ids(batch, name) < 0


def _ids(batch: pa.RecordBatch, name: str) -> np.ndarray:
    """(n,) int64 ids of a column, nulls as 0 (rows with a null id have a problem)."""
    return pc.fill_null(batch.column(name), 0).to_numpy(zero_copy_only=False)


@dataclass
class GroupPart:
    """One (model version, embedding length) group of rows without a problem, in one task:
    rows, digest parts (Spark's signed longs) and per-user arrays (:data:`_USER_FIELDS`)."""

    rows: int = 0
    low: int = 0
    xor: int = 0
    users: list[dict[str, np.ndarray]] = field(default_factory=list)


@dataclass
class TaskSurvey:
    """What one task found: rows per problem code and the groups of clean rows."""

    problems: np.ndarray
    groups: dict[tuple[str, int], GroupPart]
    seconds: float = 0.0  # the task's time in this function


def survey_task(pieces: Iterable[list[Slice]]) -> Iterator[TaskSurvey]:
    """``mapPartitions`` entry point: the survey of the slices of one task (its partition
    holds one element, the task's list of slices)."""
    started = time.perf_counter()
    problems = np.zeros(len(PROBLEMS), np.int64)
    groups: dict[tuple[str, int], GroupPart] = {}
    for piece in chain.from_iterable(pieces):
        slice_users: dict[tuple[str, int], list[dict]] = {}
        position = 0
        for batch in owned_batches(piece, COLUMNS):
            codes, lengths = row_reasons(batch)
            problems += np.bincount(codes, minlength=len(PROBLEMS))
            _survey_clean(batch, codes == 0, lengths, position, groups, slice_users)
            position += batch.num_rows
        for key, parts in slice_users.items():
            groups[key].users.append(_per_user(_concat(parts), pieces=True))
    yield TaskSurvey(problems, groups, time.perf_counter() - started)


def _survey_clean(batch: pa.RecordBatch, clean: np.ndarray, lengths: np.ndarray,
                  position: int, groups: dict, slice_users: dict) -> None:
    """Add the batch's rows without a problem to their (model version, length) groups."""
    if not clean.any():
        return
    versions = batch.column("model_version").dictionary_encode()
    version_codes = pc.fill_null(versions.indices, -1).to_numpy(zero_copy_only=False)
    names = versions.dictionary.to_pylist()
    users, items = _ids(batch, "user_id"), _ids(batch, "item_id")
    for code, width, chosen in _clean_groups(version_codes, lengths, clean):
        if len(chosen) == batch.num_rows:
            values = fixed_width_values(batch.column("embedding"), width)
        else:
            values = fixed_width_values(batch.column("embedding").take(chosen), width)
        part = groups.setdefault((names[code], width), GroupPart())
        low, xor = digest_parts(row_hash(users[chosen], items[chosen], values))
        part.rows += len(chosen)
        part.low, part.xor = part.low + low, part.xor ^ xor  # interpret() takes them mod 2^64
        slice_users.setdefault((names[code], width), []).append(
            _per_user({"user": users[chosen], "rows": np.ones(len(chosen), np.int64),
                       "lp": memory.listpack_int_bytes(items[chosen]),
                       "ht": memory.hashtable_field_bytes(items[chosen]),
                       "first": position + chosen, "last": position + chosen}))


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


def _concat(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _per_user(rows: dict[str, np.ndarray], pieces: bool = False) -> dict[str, np.ndarray]:
    """Per-user sums of row arrays (rows, lp, ht, pieces), min ``first``, max ``last``;
    ``pieces=True`` sets ``pieces`` to 1 (the parts of one slice)."""
    order = np.argsort(rows["user"], kind="stable")
    user = rows["user"][order]
    starts = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])[: len(user)]
    reduce = {"first": np.minimum, "last": np.maximum}
    out = {"user": user[starts]}
    for name, values in rows.items():
        if name != "user" and len(user):
            out[name] = reduce.get(name, np.add).reduceat(values[order], starts)
        elif name != "user":
            out[name] = values[:0]
    if pieces:
        out["pieces"] = np.ones(len(out["user"]), np.int64)
    return out


@dataclass
class Merged:
    """The tasks' surveys merged: the groups :func:`validate.interpret` reads, and per
    (model version, length) of clean rows the per-user arrays over the whole partition."""

    groups: list[dict]
    users: dict[tuple[str, int], dict[str, np.ndarray]]
    task_seconds: float = 0.0  # the slowest task's time in :func:`survey_task`


def merge(tasks: Iterable[TaskSurvey]) -> Merged:
    """Sum the tasks' counts and digest parts; merge each group's users across slices (a
    user is scattered when its rows are in more than one slice, or not one run of its
    slice)."""
    tasks = list(tasks)
    problems = sum((t.problems for t in tasks), np.zeros(len(PROBLEMS), np.int64))
    groups = [{REASON: PROBLEMS[code], "model_version": None, "bytes": None,
               "rows": int(problems[code]), "low": 0, "xor": 0}
              for code in range(1, len(PROBLEMS)) if problems[code]]
    users: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    for key in sorted({k for t in tasks for k in t.groups}):
        parts = [t.groups[key] for t in tasks if key in t.groups]
        merged = _per_user(_concat([u for p in parts for u in p.users]))
        merged["scattered"] = ((merged["pieces"] > 1)
                               | (merged["last"] - merged["first"] + 1 != merged["rows"]))
        users[key] = merged
        low, xor = 0, 0
        for part in parts:
            low, xor = low + part.low, xor ^ part.xor
        groups.append({REASON: None, "model_version": key[0], "bytes": key[1],
                       "rows": sum(p.rows for p in parts), "low": low, "xor": xor,
                       "scattered": int(merged["scattered"].sum())})
    return Merged(groups, users, max((t.seconds for t in tasks), default=0.0))


def all_scattered_users(merged: Merged, found: Survey) -> np.ndarray:
    """(k,) sorted int64 ids of every publishable user whose rows are not one run of one
    slice, with no limit (the caller compares ``k`` with its limit; the JVM path's
    :func:`validate.scattered_users` applies the limit itself and returns a list or None)."""
    users = merged.users[(found.model_version, 2 * found.dim)]
    return users["user"][users["scattered"]]


def slot_estimates(merged: Merged, found: Survey, value_factor: int, key_head: int,
                   limits: memory.HashLimits) -> list[dict]:
    """The published group's memory estimate per cluster slot, as
    :func:`validate.published_slots` gives it: (slot, users, pairs, listpack_users, bytes)."""
    users = merged.users[(found.model_version, 2 * found.dim)]
    size, listpack = memory.user_estimates(users["user"], users["rows"], users["lp"], users["ht"],
                                           2 * found.dim * value_factor, key_head, limits)
    slots = user_slots(users["user"])
    present, index = np.unique(slots, return_inverse=True)
    columns = [_sums(index, values, len(present)) for values in (
        np.ones(len(slots), np.int64), users["rows"], listpack, size)]
    return [{"slot": s, "users": u, "pairs": p, "listpack_users": lp, "bytes": b}
            for s, u, p, lp, b in zip(present.tolist(), *columns, strict=True)]


def _sums(index: np.ndarray, values: np.ndarray, bins: int) -> list[int]:
    """Exact integer sums of ``values`` per bin."""
    sums = np.zeros(bins, np.int64)
    np.add.at(sums, index, np.asarray(values, np.int64))
    return sums.tolist()


def publishable(batch: pa.RecordBatch, model_version: str, dim: int) -> np.ndarray:
    """(n,) True for the rows published under ``model_version`` and ``dim``."""
    codes, lengths = row_reasons(batch)
    same = pc.fill_null(pc.equal(batch.column("model_version"), model_version), False)
    return (codes == 0) & (lengths == 2 * dim) & same.to_numpy(zero_copy_only=False)


def write_task(pieces: Iterable[list[Slice]], target: WriteTarget, model_version: str, dim: int,
               scattered: np.ndarray) -> Iterator[dict]:
    """``mapPartitions`` entry point: write the publishable rows of the task's slices,
    except those of ``scattered`` users (sorted int64); yields the writer's stats row."""
    writer = PartitionWriter(target)
    try:
        for piece in chain.from_iterable(pieces):
            for batch in owned_batches(piece, COLUMNS):
                keep = publishable(batch, model_version, dim)
                if len(scattered):
                    keep &= ~np.isin(_ids(batch, "user_id"), scattered)
                rows = pa.RecordBatch.from_arrays(
                    [batch.column(n) for n in ("user_id", "item_id", "embedding")],
                    names=["user_id", "item_id", "embedding"])
                writer.add(rows if keep.all() else rows.filter(pa.array(keep)))
        stats = writer.finish()
    finally:
        writer.close()
    yield stats.to_pylist()[0]
