"""Batch inference: the serving model's embeddings for one interval's speculated pairs (Spark).

Reads ``speculated/interval=KEY`` (user_id, item_id, score, sources) and
``mined/user_history/interval=KEY`` (docs/pipeline.md), groups the pairs by user, joins each
user's history (users without a history row get the empty history), and runs the model in
``mapInArrow``: the model is loaded once per Python worker (through the factory its artefact's
manifest names, if ``SOLARIS_MODEL_FACTORIES`` allows it: any
:class:`~solaris_lib.model.contract.InteractionModel`) and every user's history is encoded once
for all of its items. CUDA with bf16 autocast when a GPU is present, CPU fp32
otherwise. Writes ``embeddings/interval=KEY`` atomically::

    user_id int64, item_id int64, model_version string, embedding binary (dim x fp16, LE)

Rows whose embedding is not finite (in fp32 or after the fp16 cast) are counted and never
written; when their share exceeds ``max_non_finite_share`` nothing is written at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from solaris_lib.config import SolarisSettings
from solaris_lib.errors import ConfigError, SolarisError
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, MINED, SPECULATED, DataLayout
from solaris_lib.model import artefact
from solaris_lib.model.train import MODEL_NAME
from solaris_lib.sparkutil import read_parquet
from solaris_lib.storage import atomic_folder, is_complete

log = logging.getLogger(__name__)
USER_HISTORY = "user_history"
ROWS_PER_FILE = 1_000_000
PAIRS_PER_PARTITION = 200_000
OUTPUT_DDL = ("user_id long, item_id long, model_version string, embedding binary, "
              "finite boolean")


class MissingPartitionError(SolarisError):
    """An input partition the job needs is absent or incomplete."""

    exit_code = 2


class NonFiniteOutputError(SolarisError):
    """Too many embeddings came out NaN or infinite: the model is broken; nothing was written."""

    exit_code = 5


MAX_NON_FINITE_SHARE = 0.001  # of a table's embeddings; beyond, none of them is written


@dataclass(frozen=True)
class InferRequest:
    interval: Interval
    model_version: str | None = None  # default: the serving version
    batch_users: int = 256  # users per forward pass
    threads: int = 1  # torch intra-op threads per Python worker
    max_non_finite_share: float = MAX_NON_FINITE_SHARE

    def __post_init__(self) -> None:
        if self.batch_users < 1 or self.threads < 1:
            raise ConfigError("--batch-users and --threads must be >= 1")
        if not 0.0 <= self.max_non_finite_share <= 1.0:
            raise ConfigError("max_non_finite_share must be in [0, 1]")
        if self.model_version is not None:
            artefact.check_version_name(self.model_version)


@dataclass
class InferReport:
    interval: str
    model_version: str
    output: str
    users: int
    users_without_history: int
    rows_written: int
    non_finite: int
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_MODELS: dict[str, object] = {}


def _embedder(folder: str, version: str, threads: int, factories: tuple[str, ...]):
    """The worker's model, loaded once per (Python worker, version folder), on the GPU Spark
    assigned to the task when it assigned one (moved there when the worker's previous task had
    another: one copy per worker), else on the default device (the first GPU, or the CPU)."""
    import torch

    device = _task_device()
    model = _MODELS.get(folder)
    if model is None:
        from solaris_lib.model.online import FoundationEmbedder

        torch.set_num_threads(threads)
        model = _MODELS[folder] = FoundationEmbedder.load(folder, device, version=None,
                                                          factories=factories)
    elif device is not None and str(model.device) != device:
        model.to(device)
    return model


def _task_device() -> str | None:
    """``cuda:N`` for the GPU Spark assigned to this task (:func:`~solaris_lib.sparkutil.
    task_gpu`), made the current CUDA device (pinned host memory and new tensors go there, not
    to the first GPU); None without one or without CUDA."""
    import torch

    from solaris_lib.sparkutil import task_gpu

    if not torch.cuda.is_available():
        return None
    gpu = task_gpu(torch.cuda.device_count())
    if gpu is None:
        return None
    torch.cuda.set_device(gpu)
    return f"cuda:{gpu}"


@dataclass(frozen=True)
class EmbedBatches:
    """Picklable ``mapInArrow`` function: (user_id, item_ids, h_items, h_ts, h_clicked) rows in,
    one output row per (user, item) out."""

    folder: str
    version: str
    asof_us: int
    batch_users: int
    threads: int
    factories: tuple[str, ...]  # allowed model factories (SOLARIS_MODEL_FACTORIES)

    def over(self, frame):
        """``frame``'s rows embedded (:data:`OUTPUT_DDL`), its users in id order within each
        partition: the model's passes (whose padded widths follow their users) are the same on
        every rerun, and so are the fp16 bytes and the cache digest."""
        return frame.sortWithinPartitions("user_id").mapInArrow(self, OUTPUT_DDL)

    def __call__(self, batches):
        model = _embedder(self.folder, self.version, self.threads, self.factories)
        for batch in batches:
            for start in range(0, batch.num_rows, self.batch_users):
                yield self.embed(model, batch.slice(start, self.batch_users))

    def embed(self, model, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow.compute as pc

        from solaris_lib.cache.pairs import binary_column
        from solaris_lib.model.examples import EventLists

        history = pa.table({
            "user_id": batch.column("user_id"), "item_ids": batch.column("h_items"),
            "ts": batch.column("h_ts"), "clicked": batch.column("h_clicked"),
            "asof": pa.array(np.full(batch.num_rows, self.asof_us), pa.int64()).cast(
                pa.timestamp("us", tz="UTC")),
        })
        events = EventLists.from_user_history(history)
        users = batch.column("user_id").to_numpy()
        counts = pc.list_value_length(batch.column("item_ids")).to_numpy(zero_copy_only=False)
        items = pc.list_flatten(batch.column("item_ids")).to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(len(users)), counts)
        order = np.lexsort((items, owner))  # items sorted within each user: deterministic
        emb, _ = model.score_users(events, users, counts, items[order], self.asof_us)
        emb16 = emb.astype("<f2")
        finite = np.isfinite(emb).all(axis=1) & np.isfinite(emb16).all(axis=1)
        return pa.RecordBatch.from_arrays(
            [pa.array(np.repeat(users, counts), pa.int64()), pa.array(items[order], pa.int64()),
             pa.array([self.version] * len(finite), pa.string()), binary_column(emb16),
             pa.array(finite)],
            names=["user_id", "item_id", "model_version", "embedding", "finite"])


def _require(path: str, what: str) -> str:
    if not is_complete(path):
        raise MissingPartitionError(f"{what} partition {path} is missing or incomplete; run the "
                                    "stage that writes it for this interval first")
    return path


def user_pairs(spark, spec_path: str, hist_path: str, pairs_per_partition: int = PAIRS_PER_PARTITION):
    """One row per user: its distinct speculated items and its history lists (null when it has
    none). Both sides are hash-partitioned by user into ``ceil(pairs / pairs_per_partition)``
    partitions, so grouping and joining add no further shuffle (the session default of a
    cluster, e.g. 200 shuffle partitions, would mean hundreds of near-empty tasks)."""
    from pyspark.sql import functions as F

    spec = read_parquet(spark, spec_path).select("user_id", "item_id")
    partitions = max(1, -(-spec.count() // pairs_per_partition))
    grouped = spec.repartition(partitions, "user_id").groupBy("user_id").agg(
        F.array_distinct(F.collect_list("item_id")).alias("item_ids"))
    hist = read_parquet(spark, hist_path).select(
        "user_id", F.col("item_ids").alias("h_items"), F.col("ts").alias("h_ts"),
        F.col("clicked").alias("h_clicked")).repartition(partitions, "user_id")
    return grouped.join(hist, "user_id", "left")


def run_inference(spark, settings: SolarisSettings, request: InferRequest) -> InferReport:
    """Embed the speculated pairs of ``request.interval`` and write the embeddings partition."""
    layout = DataLayout.from_settings(settings)
    spec = _require(layout.output(SPECULATED, request.interval), "speculated")
    hist = _require(layout.output(MINED, request.interval, USER_HISTORY), "user history")
    folder, version = artefact.resolve(layout.model(MODEL_NAME), request.model_version)
    factories = settings.allowed_model_factories
    artefact.check_factory(folder, factories)  # refuse on the driver, before Spark starts work
    started = time.perf_counter()
    users = user_pairs(spark, spec, hist)
    fn = EmbedBatches(folder, version, int(request.interval.end.timestamp() * 1_000_000),
                      request.batch_users, request.threads, factories)
    out = fn.over(users).persist()
    final = layout.output(EMBEDDINGS, request.interval)
    try:
        written, rejected = _write(out, final, request)
    finally:
        out.unpersist()
    n_users, no_history = _user_counts(users)
    report = InferReport(
        interval=request.interval.key, model_version=version, output=final,
        users=n_users, users_without_history=no_history, rows_written=written, non_finite=rejected,
        seconds=round(time.perf_counter() - started, 3))
    log.info("embedded %d pairs of %d users (%d without history) with %s in %.1f s "
             "(%.0f pairs/s); %d non-finite rejected", written, report.users,
             report.users_without_history, version, report.seconds,
             written / max(report.seconds, 1e-9), rejected)
    return report


def _user_counts(users) -> tuple[int, int]:
    """(users, users without a history row) in one job."""
    from pyspark.sql import functions as F

    row = users.agg(F.count(F.lit(1)).alias("n"),
                    F.sum(F.col("h_items").isNull().cast("long")).alias("none")).first()
    return int(row["n"]), int(row["none"] or 0)


def finite_counts(out, limit: float, target: str) -> tuple[int, int]:
    """(finite, non-finite) rows of ``out`` (its ``finite`` column; one job).

    Raises :class:`NonFiniteOutputError` when the non-finite rows are more than ``limit`` of all
    (``target``: what is then not written); logs them otherwise."""
    counts = out.groupBy("finite").count().collect()
    by_flag = {row["finite"]: row["count"] for row in counts}
    good, bad = by_flag.get(True, 0), by_flag.get(False, 0)
    if bad and bad > limit * (good + bad):
        raise NonFiniteOutputError(
            f"{bad} of {good + bad} embeddings are NaN or infinite (limit {limit:.2%}); nothing "
            f"written to {target}. Check the model")
    if bad:
        log.warning("rejected %d non-finite embeddings (of %d) for %s", bad, good + bad, target)
    return good, bad


def _write(out, final: str, request: InferRequest) -> tuple[int, int]:
    """Write the finite rows of ``out`` to ``final`` atomically: (rows written, rejected)."""
    from pyspark.sql import functions as F

    good, bad = finite_counts(out, request.max_non_finite_share, final)
    files = max(1, -(-good // ROWS_PER_FILE))
    rows = (out.filter(F.col("finite")).drop("finite").repartition(files, "user_id")
            .sortWithinPartitions("user_id", "item_id"))
    with atomic_folder(final) as staging:
        rows.write.mode("overwrite").parquet(staging)
    return good, bad
