"""How a publish reads the embeddings partition: two paths with the same results.

* :class:`DirectInput` (``PublishConfig.direct_read``, the default): the driver reads the
  parquet footers and cuts the files into slices (:mod:`slices`); Spark runs them as a Python
  RDD, one task per group of slices, and each task opens its files with pyarrow and does its
  numpy work (:mod:`direct`): the survey, then the write. No JVM parquet scan and no Arrow
  conversion between the JVM and Python; the tasks' per-user parts are merged on the driver.
  Rows of users that are not one run of one slice ("scattered") are written by the JVM
  path's shuffle by user; when there are more than the publisher's limit of them, every row
  is (the whole write is then the JVM path's).
* :class:`SparkInput`: Spark SQL over ``spark.read.parquet`` (:mod:`validate`,
  :mod:`frames`). Used when ``direct_read`` is off and for versions with the hierarchical
  fallback level (its cluster rows are Spark frames and join the users' rows in the shuffle).

Both give the same :class:`validate.Survey` (the digest is Spark's ``xxhash64``, computed by
:mod:`rowhash` on the direct path), the same memory estimate and the same bytes in Redis;
only ``Survey.scattered`` can differ (a run of one slice against one of one Spark partition).
"""

from __future__ import annotations

import logging
from functools import partial

import numpy as np
import pyarrow as pa

from solaris_lib.cache import direct, frames, slices
from solaris_lib.cache.memory import HashLimits
from solaris_lib.cache.validate import (
    COLUMNS,
    Survey,
    check_columns,
    check_types,
    fold,
    interpret,
    publishable_users,
    published_slots,
    reason,
    scattered_users,
    user_groups,
)
from solaris_lib.cache.writer import WriteTarget

log = logging.getLogger(__name__)
_SPARK_TYPES = {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string",
                pa.large_string(): "string", pa.binary(): "binary", pa.large_binary(): "binary",
                pa.float64(): "double", pa.float32(): "float"}


def read_frame(spark, source: str):
    """The partition as a Spark frame of the contract's columns (types checked)."""
    frame = spark.read.parquet(source)
    check_columns(frame, source)
    return frame.select(*COLUMNS)


class SparkInput:
    """The JVM path: Spark SQL over the partition."""

    name = "spark"
    survey_task_seconds = None  # the survey is one Spark SQL job: no task of its own

    def __init__(self, spark, source: str) -> None:
        self.spark, self.source = spark, source
        self.frame = read_frame(spark, source)
        # not persisted: the one job of the survey lets adaptive execution size its
        # partitions (a cached frame keeps every shuffle partition); later uses recompute it
        self.groups = user_groups(self.frame, frames.field_sizes())

    def survey(self, value_factor: int, key_head: int, limits: HashLimits
               ) -> tuple[Survey, list[dict]]:
        """The survey and the published group's memory estimate per slot, in one job."""
        tallied = frames.tally(self.groups, value_factor, key_head, limits)
        found = interpret(fold(tallied), self.source)
        return found, published_slots(tallied, found)

    def scattered(self, found: Survey, limit: int) -> list[int] | None:
        return scattered_users(self.groups, found, limit)

    def users(self, found: Survey):
        """Frame (user_id, pairs, lp, ht) of the published users."""
        return publishable_users(self.groups, found)

    def valid(self, found: Survey):
        """Frame (user_id, item_id, embedding) of the publishable rows."""
        published = self.frame.where(reason(found.model_version, found.dim).isNull())
        return published.select("user_id", "item_id", "embedding")

    def write(self, found: Survey, target: WriteTarget, partitions: int,
              scattered: list[int] | None, extra=None) -> list[dict]:
        """Every publishable row (and ``extra`` rows, the fallback level's) into Redis."""
        valid = self.valid(found)
        if extra is not None:
            valid = valid.unionByName(extra)
        return frames.write(valid, target, partitions, scattered)


class DirectInput:
    """The direct path: pyarrow reads in Spark tasks (see the module docstring)."""

    name = "direct"

    def __init__(self, spark, source: str, tasks: int) -> None:
        self.spark, self.source = spark, source
        files = slices.describe(source, check=check_file_columns)
        self.tasks = slices.plan(files, tasks)
        self.merged: direct.Merged | None = None
        self._jvm: SparkInput | None = None

    @property
    def jvm(self) -> SparkInput:
        """The JVM path over the same partition (scattered users, the quarantine)."""
        if self._jvm is None:
            self._jvm = SparkInput(self.spark, self.source)
        return self._jvm

    @property
    def frame(self):
        return self.jvm.frame

    @property
    def survey_task_seconds(self) -> float | None:
        """The slowest survey task's seconds (after :meth:`survey`)."""
        return self.merged.task_seconds if self.merged else None

    def _run(self, entry) -> list:
        if not self.tasks:
            return []
        rdd = self.spark.sparkContext.parallelize(self.tasks, len(self.tasks))
        return rdd.mapPartitions(entry).collect()

    def survey(self, value_factor: int, key_head: int, limits: HashLimits
               ) -> tuple[Survey, list[dict]]:
        """The survey and the published group's memory estimate per slot, in one job."""
        self.merged = direct.merge(self._run(direct.survey_task))
        found = interpret(self.merged.groups, self.source)
        return found, direct.slot_estimates(self.merged, found, value_factor, key_head, limits)

    def scattered(self, found: Survey, limit: int) -> list[int] | None:
        users = direct.all_scattered_users(self.merged, found)
        return None if len(users) > limit else users.tolist()

    def write(self, found: Survey, target: WriteTarget, partitions: int,
              scattered: list[int] | None, extra=None) -> list[dict]:
        """Users in one run of one slice from the slices, in file order; the others through
        the JVM path's shuffle by user (every row when ``scattered`` is None)."""
        if extra is not None:
            raise ValueError("the fallback level's rows are written by the JVM path "
                             "(publish reads intervals with the level through SparkInput)")
        if scattered is None:
            return self.jvm.write(found, target, partitions, scattered=None)
        moved = np.array(sorted(scattered), dtype=np.int64)
        stats = self._run(partial(direct.write_task, target=target,
                                  model_version=found.model_version, dim=found.dim,
                                  scattered=moved))
        if len(moved):
            from pyspark.sql import functions as F

            rows = self.jvm.valid(found).where(F.col("user_id").isin(scattered))
            stats += frames.write(rows, target, partitions, scattered=None)
        return stats


def check_file_columns(path: str, schema: pa.Schema) -> None:
    """Refuse a file without the contract's columns and types (as :func:`check_columns`);
    a type the direct path does not read (e.g. dictionary<string>) is refused as well."""
    check_types({f.name: _SPARK_TYPES.get(f.type, str(f.type)) for f in schema}, path)
