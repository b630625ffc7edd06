"""How a publish reads an input table: Spark tasks that open the parquet files with pyarrow.

The driver reads only the files' footers and cuts them into slices balanced by rows
(:mod:`slices`); Spark runs the slices as a Python RDD, one task per group of slices, and each
task reads its rows with pyarrow and does its numpy work: the survey (:mod:`survey`), then the
write (:mod:`writer`), then, only when rows were refused, the quarantine. No JVM parquet scan
and no Arrow conversion between the JVM and Python: measured by ``benchmarks/cache_fill.py``,
this path publishes about five times faster than Spark SQL over the same files.

A user whose rows are one run of one slice (the infer job writes each user's rows together)
is written by the task that reads it, in file order. The rows of "scattered" users (rows in
several slices or runs) are shuffled by user through Spark (an RDD ``partitionBy``) and written
after a sort; when there are more than the publisher's limit of them, every row is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from solaris_lib.cache import slices
from solaris_lib.cache.pairs import fixed_width_values, non_finite_fp16
from solaris_lib.cache.rows import (
    NON_FINITE,
    REASON,
    Survey,
    Table,
    ids,
    plain,
    published,
    row_codes,
)
from solaris_lib.cache.survey import Layout, Merged, merge, survey_task
from solaris_lib.cache.writer import WriteTarget, write_rows
from solaris_lib.storage import filesystem

log = logging.getLogger(__name__)


class Inputs:
    """The input tables of one publish (``(table, complete partition folder)`` each), read by
    Spark tasks: each job runs the tasks of every table at once (at most ``tasks`` per
    table)."""

    def __init__(self, spark, tables: list[tuple[Table, str]], tasks: int) -> None:
        self.spark = spark
        self.partitions = tasks
        self.tables = {table.name: table for table, _ in tables}
        self.plans = {table.name: slices.plan(slices.describe(source, check=table.check_schema),
                                              tasks) for table, source in tables}

    def _run(self, entries: dict[str, Callable], names: Iterable[str] | None = None) -> dict:
        """One job: ``entries[name](slices)`` for the slices of every task of the named tables
        (all by default); the results per table. Task ``k`` of the job runs task ``k`` of each
        table, so that every Spark task gets a share of each table."""
        chosen = list(self.plans if names is None else names)
        width = max((len(self.plans[name]) for name in chosen), default=0)
        work = [[(name, self.plans[name][k]) for name in chosen if k < len(self.plans[name])]
                for k in range(width)]
        if not work:
            return {name: [] for name in entries}
        rdd = self.spark.sparkContext.parallelize(work, len(work))
        done = rdd.mapPartitions(partial(_dispatch, entries=entries)).collect()
        out: dict[str, list] = {name: [] for name in entries}
        for name, result in done:
            out[name].append(result)
        return out

    def survey(self, layouts: dict[str, Layout]) -> dict[str, Merged]:
        """Row problems, digest parts, scattered users and memory per slot of every table, in
        one job."""
        found = self._run({name: partial(survey_task, layout=layouts[name])
                           for name in self.plans})
        return {name: merge(tasks, self.tables[name]) for name, tasks in found.items()}

    def write(self, plans: dict[str, tuple[Survey, WriteTarget, np.ndarray]], limit: int
              ) -> dict[str, list[dict]]:
        """Every published row of the tables of ``plans`` (name -> (survey, target, scattered
        users)) into Redis, in one job (and a shuffle job when users are scattered); the stats
        of each writing task per table. Users in one run of one slice are written by the task
        reading them; the rows of scattered users (every row of a table with more than
        ``limit`` of them) after a shuffle by user."""
        in_order = {name: partial(_write_task, table=self.tables[name], found=found,
                                  target=target, scattered=scattered)
                    for name, (found, target, scattered) in plans.items()
                    if len(scattered) <= limit}
        stats = self._run(in_order, in_order)
        for name, (found, target, scattered) in plans.items():
            if name not in in_order:
                log.info("%s: every row shuffled by user (%d scattered users)", name,
                         len(scattered))
                stats.setdefault(name, []).extend(self._shuffled(name, found, target, None))
            elif len(scattered):
                log.info("%s: %d scattered users' rows shuffled by user", name, len(scattered))
                stats[name].extend(self._shuffled(name, found, target, scattered))
        return stats

    def _shuffled(self, name: str, found: Survey, target: WriteTarget,
                  users: np.ndarray | None) -> list[dict]:
        """Write the rows of ``users`` (every row when None) of table ``name`` after a shuffle
        by user."""
        pick = partial(_published_rows, table=self.tables[name], found=found, scattered=users,
                       keep_scattered=True)
        tasks = self.plans[name]
        rdd = self.spark.sparkContext.parallelize(tasks, len(tasks))
        moved = rdd.mapPartitions(partial(_by_user, rows=pick, parts=self.partitions))
        return moved.partitionBy(self.partitions, lambda key: key).mapPartitions(
            partial(_write_shuffled, target=target)).collect()

    def quarantine(self, name: str, found: Survey, staging: str) -> None:
        """Write every refused row of table ``name`` with its reason (``_reason``) under
        ``staging``."""
        self._run({name: partial(_quarantine_task, table=self.tables[name], found=found,
                                 staging=staging)}, [name])


def _dispatch(work: Iterable[list[tuple[str, list]]], entries: dict[str, Callable]
              ) -> Iterator[tuple[str, object]]:
    """``mapPartitions`` entry point: run the entry of each (table, slices) of the task."""
    for name, task in chain.from_iterable(work):
        yield name, entries[name]([task])


def _batches(pieces: Iterable[list[slices.Slice]], table: Table) -> Iterator[pa.RecordBatch]:
    for piece in chain.from_iterable(pieces):
        yield from map(plain, slices.owned_batches(piece, list(table.columns)))


def _published_rows(pieces, table: Table, found: Survey, scattered: np.ndarray | None,
                    keep_scattered: bool = False
                    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(users, field ids, (n, 2 * dim) fp16 bytes) of the published rows of the task's slices: those of
    users not in ``scattered``, or (``keep_scattered``) only theirs (every row when None)."""
    for batch in _batches(pieces, table):
        keep = published(batch, table, found.model_version, found.dim)
        users = ids(batch, "user_id")
        if scattered is not None and len(scattered):
            inside = np.isin(users, scattered)
            keep &= inside if keep_scattered else ~inside
        elif scattered is not None and keep_scattered:
            keep[:] = False
        if keep.all():
            yield (users, ids(batch, table.id_column),
                   fixed_width_values(batch.column("embedding"), 2 * found.dim))
        elif keep.any():
            chosen = np.flatnonzero(keep)
            yield (users[chosen], ids(batch, table.id_column)[chosen],
                   fixed_width_values(batch.column("embedding").take(chosen), 2 * found.dim))


def _write_task(pieces, table: Table, found: Survey, target: WriteTarget,
                scattered: np.ndarray) -> dict:
    """Write the task's published rows of users that are not scattered, in file order."""
    return write_rows(_published_rows(pieces, table, found, scattered), target)


def _by_user(pieces, rows, parts: int) -> Iterator[tuple[int, tuple]]:
    """The rows keyed by the partition that writes their user (``user mod parts``)."""
    for users, items, values in rows(pieces):
        owner = users % parts
        for part in np.unique(owner).tolist():
            mine = owner == part
            yield part, (users[mine], items[mine], values[mine])


def _write_shuffled(entries: Iterable[tuple[int, tuple]], target: WriteTarget
                    ) -> Iterator[dict]:
    """``mapPartitions`` entry point after the shuffle: one partition's users, sorted by user
    (rows of one user keep their order), written as one run each."""
    found = [rows for _, rows in entries]
    if not found:
        return
    users, items, values = (np.concatenate(column) for column in zip(*found, strict=True))
    order = np.argsort(users, kind="stable")
    yield write_rows([(users[order], items[order], values[order])], target)


def _quarantine_task(pieces, table: Table, found: Survey, staging: str) -> int:
    """The task's refused rows, with their reason, as one parquet file under ``staging``;
    returns the rows written."""
    refused = [batch for batch in map(partial(_refused, table=table, found=found),
                                      _batches(pieces, table)) if batch.num_rows]
    if refused:
        fs, inner = filesystem(staging)
        with fs.open_output_stream(f"{inner}/part-{uuid.uuid4().hex}.parquet") as out:
            pq.write_table(pa.Table.from_batches(refused), out)
    return sum(batch.num_rows for batch in refused)


def _refused(batch: pa.RecordBatch, table: Table, found: Survey) -> pa.RecordBatch:
    """The batch's rows that are not published, with the first reason of each."""
    codes, lengths = row_codes(batch, table)
    reason = np.array(table.problems, dtype=object)[codes]
    clean = codes == 0
    versions = np.asarray(batch.column("model_version").to_pylist(), dtype=object)
    reason[clean & (versions != found.model_version)] = "other_model_version"
    same = clean & (versions == found.model_version)
    reason[same & (lengths != 2 * found.dim)] = "wrong_embedding_length"
    good = np.flatnonzero(same & (lengths == 2 * found.dim))
    if len(good):
        values = fixed_width_values(batch.column("embedding").take(good), 2 * found.dim)
        reason[good[non_finite_fp16(values)]] = NON_FINITE
    bad = np.flatnonzero(reason != None)  # noqa: E711 - elementwise on an object array
    chosen = batch.take(pa.array(bad))
    return chosen.append_column(REASON, pa.array(reason[bad].tolist(), pa.string()))
