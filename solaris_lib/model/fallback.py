"""The fallback levels' embeddings of one interval, by the batch-inference UDF (Spark).

Run by ``jobs/infer_embeddings.py`` after the exact embeddings, with the same model version and
as of the same time (``interval.end``). Every embedding is computed before any table is
replaced; when the non-finite ones exceed the exact path's ``max_non_finite_share`` none is
written (the job skips the level: :func:`embed_fallback_level`).
Then writes, each atomically with ``_SUCCESS``, under ``embeddings/<table>/interval=KEY``
(:mod:`solaris_lib.layout`); the cluster table records the digest of the item table it was
embedded for (``_CLUSTERING``): the publisher skips a level whose two tables disagree (a run
that failed between its writes).

===================== ==========================================================================
``cluster``           ``user_id`` int64, ``cluster_id`` int32, ``model_version`` string,
                      ``embedding`` binary (``dim`` little-endian fp16): every speculated user with
                      every cluster's representative item (the CLUSTER level)
``item_clusters``     ``item_id`` int64, ``cluster_id`` int32 (:mod:`~solaris_lib.fallback.clusters`)
``item_prior``        ``item_id`` int64, ``model_version`` string, ``embedding`` binary: every
                      clustered item with an empty history (the ITEM level)
===================== ==========================================================================

The cache publisher stores a user's cluster embeddings in the user's cluster hash and the item
tables in chunk strings (``docs/cache-format.md``).
"""

from __future__ import annotations

import logging

import numpy as np

from solaris_lib.fallback.clusters import CLUSTERING_MARKER, ItemClusters, build_item_clusters
from solaris_lib.layout import (
    CLUSTER_EMBEDDINGS,
    EMBEDDINGS,
    ITEM_CLUSTERS,
    ITEM_PRIORS,
    MINED,
    SPECULATED,
    DataLayout,
)
from solaris_lib.model.inference import MAX_NON_FINITE_SHARE
from solaris_lib.sparkutil import read_parquet

log = logging.getLogger(__name__)

PRIOR_ITEMS_PER_ROW = 256  # items of one pseudo-user row of the prior inference


def prior_users(items: np.ndarray) -> np.ndarray:
    """(n,) ascending negative pseudo-user ids, one per ``PRIOR_ITEMS_PER_ROW`` items: ids that
    no history has, so the FM embeds each item with an empty history."""
    rows = np.arange(len(items)) // PRIOR_ITEMS_PER_ROW
    return (rows - (rows[-1] + 1 if len(rows) else 0)).astype(np.int64)


def item_clusters_of(spark, layout: DataLayout, interval, *, k: int, buckets: int,
                     seed: int) -> tuple[ItemClusters, np.ndarray]:
    """Clusters (and representatives) from the retrieval factors the interval's speculate run
    read (:func:`~solaris_lib.speculation.pipeline.load_factors`) and its mined
    ``item_stats``."""
    from solaris_lib.speculation.io import read_partition
    from solaris_lib.speculation.pipeline import load_factors

    _, item_factors = load_factors(spark, layout, interval)
    if item_factors is not None:
        f = item_factors.orderBy("item_id").toArrow()
        f_items = f.column("item_id").to_numpy()
        vectors = (np.stack(f.column("factor").to_numpy(zero_copy_only=False)) if len(f_items)
                   else np.zeros((0, 1), np.float32))
    else:
        f_items, vectors = np.zeros(0, np.int64), np.zeros((0, 1), np.float32)
    stats = read_partition(spark, layout.output(MINED, interval, "item_stats"))
    stats = stats.select("item_id", "popularity").orderBy("item_id").toArrow()
    return build_item_clusters(f_items, vectors, stats.column("item_id").to_numpy(),
                               stats.column("popularity").to_numpy(), k=k, buckets=buckets,
                               seed=seed)


def _history(spark, hist_path: str):
    """The mined user histories with the column names the inference UDF reads."""
    from pyspark.sql import functions as F

    return read_parquet(spark, hist_path).select(
        "user_id", F.col("item_ids").alias("h_items"), F.col("ts").alias("h_ts"),
        F.col("clicked").alias("h_clicked"))


def _cluster_embeddings(spark, embed, hist_path: str, users_df, representatives: np.ndarray):
    """DataFrame (user_id, cluster_id, model_version, embedding, finite): each user of
    ``users_df`` with each cluster's representative item."""
    from pyspark.sql import functions as F

    reps = [int(r) for r in representatives]
    rep_df = spark.createDataFrame([(r, c) for c, r in enumerate(reps)],
                                   "item_id long, cluster_id int")
    grouped = users_df.select("user_id", F.array(*[F.lit(r) for r in reps]).cast(
        "array<bigint>").alias("item_ids")).join(_history(spark, hist_path), "user_id", "left")
    return embed.over(grouped).join(F.broadcast(rep_df), "item_id").select(
        "user_id", "cluster_id", "model_version", "embedding", "finite")


def _prior_embeddings(spark, embed, hist_path: str, items: np.ndarray):
    """DataFrame (item_id, model_version, embedding, finite): pseudo-users without a history
    row (the left join gives them the empty history) with every item."""
    users = prior_users(items)
    cuts = np.flatnonzero(np.diff(users)) + 1
    rows = [(int(part_users[0]), part_items.tolist())
            for part_users, part_items in zip(np.split(users, cuts), np.split(items, cuts),
                                              strict=True) if len(part_users)]
    pseudo = spark.createDataFrame(rows, "user_id long, item_ids array<bigint>")
    grouped = pseudo.join(_history(spark, hist_path), "user_id", "left")
    return embed.over(grouped).select("item_id", "model_version", "embedding", "finite")


def infer_cluster_embeddings(spark, settings, interval, model_version: str | None = None, *,
                             k: int = 32, buckets: int = 4, seed: int = 7,
                             batch_users: int = 256, threads: int = 1,
                             priors: bool = True,
                             max_non_finite_share: float = MAX_NON_FINITE_SHARE) -> dict:
    """Write the interval's ``item_clusters``, ``cluster`` and (with ``priors``) ``item_prior``
    tables with ``model_version`` (None: the serving version), as of ``interval.end``.

    Inputs (complete partitions of ``interval``): ``speculated`` (the users to cover),
    ``mined/user_history`` and ``mined/item_stats``, and the retrieval factors its speculate
    run read (the newest fitted on logs up to its end when that run recorded none).
    Returns counts: ``users``, ``clusters``, ``items``, ``rows_written``, ``item_priors``,
    ``model_version``, and ``non_finite`` / ``prior_non_finite``: the embeddings that were inf
    or nan, not written (logged). More than ``max_non_finite_share`` of either table's raise
    :class:`~solaris_lib.model.inference.NonFiniteOutputError` before any table is replaced.
    """
    from solaris_lib.model import artefact
    from solaris_lib.model.inference import ROWS_PER_FILE, EmbedBatches, finite_counts
    from solaris_lib.model.train import MODEL_NAME
    from solaris_lib.speculation.io import read_partition

    layout = DataLayout.from_settings(settings)
    users_df = read_partition(spark, layout.output(SPECULATED, interval)).select(
        "user_id").distinct().orderBy("user_id")
    hist_path = layout.output(MINED, interval, "user_history")
    read_partition(spark, hist_path)  # fails clearly when missing
    clusters, representatives = item_clusters_of(spark, layout, interval, k=k, buckets=buckets,
                                                 seed=seed)
    folder, version = artefact.resolve(layout.model(MODEL_NAME), model_version)
    factories = settings.allowed_model_factories
    artefact.check_factory(folder, factories)
    embed = EmbedBatches(folder, version, int(interval.end.timestamp() * 1_000_000),
                         batch_users, threads, factories)
    users = int(users_df.count())
    # persisted: counted, then written (the range partitioning of several files samples its
    # input first): the model runs once
    tables = {CLUSTER_EMBEDDINGS: _cluster_embeddings(spark, embed, hist_path, users_df,
                                                      representatives).persist()}
    if priors:
        tables[ITEM_PRIORS] = _prior_embeddings(spark, embed, hist_path,
                                                clusters.item_ids).persist()
    try:
        bad = {name: finite_counts(frame, max_non_finite_share,
                                   layout.output(EMBEDDINGS, interval, name))[1]
               for name, frame in tables.items()}
        written = _write_level(spark, layout, interval, clusters, tables,
                               files=max(1, -(-users * len(representatives) // ROWS_PER_FILE)))
    finally:
        for frame in tables.values():
            frame.unpersist()
    report = {"users": users, "clusters": len(representatives),
              "items": written[ITEM_CLUSTERS], "rows_written": written[CLUSTER_EMBEDDINGS],
              "item_priors": written.get(ITEM_PRIORS, 0), "model_version": version,
              "non_finite": bad[CLUSTER_EMBEDDINGS], "prior_non_finite": bad.get(ITEM_PRIORS, 0)}
    if report["non_finite"] or report["prior_non_finite"]:
        log.warning("fallback level of %s: %d cluster and %d prior embeddings were inf or nan "
                    "and are not written", interval.key, report["non_finite"],
                    report["prior_non_finite"])
    log.info("cluster embeddings of %s: %s", interval.key, report)
    return report


def _write_level(spark, layout: DataLayout, interval, clusters: ItemClusters, tables: dict,
                 files: int) -> dict[str, int]:
    """Replace the level's tables (the item table, then ``tables``' finite rows); returns the
    rows written per table. The cluster table records the item table's digest."""
    from pyspark.sql import functions as F

    from solaris_lib.speculation.io import write_partition

    items_df = spark.createDataFrame(
        [(int(i), int(c)) for i, c in zip(clusters.item_ids, clusters.cluster_ids, strict=True)],
        "item_id long, cluster_id int")
    written = {ITEM_CLUSTERS: write_partition(
        items_df, layout.output(EMBEDDINGS, interval, ITEM_CLUSTERS), ["item_id"])}
    written[CLUSTER_EMBEDDINGS] = write_partition(
        tables[CLUSTER_EMBEDDINGS].filter(F.col("finite")).drop("finite"),
        layout.output(EMBEDDINGS, interval, CLUSTER_EMBEDDINGS), ["user_id", "cluster_id"],
        partitions=files, markers={CLUSTERING_MARKER: clusters.digest()})
    if ITEM_PRIORS in tables:
        written[ITEM_PRIORS] = write_partition(
            tables[ITEM_PRIORS].filter(F.col("finite")).drop("finite"),
            layout.output(EMBEDDINGS, interval, ITEM_PRIORS), ["item_id"])
    return written


def embed_interval(spark, settings, request) -> dict:
    """The infer stage of one interval (the job's and ``solaris infer-embeddings``): the exact
    embeddings (:func:`~solaris_lib.model.inference.run_inference`), then the fallback levels'
    tables with the same model version (:func:`embed_fallback_level`); ``fallback_skipped``:
    the level is on but was not written (a metric to alert on)."""
    from solaris_lib.model.inference import run_inference

    report = run_inference(spark, settings, request)
    fallback = embed_fallback_level(spark, settings, request.interval, report.model_version,
                                    request.max_non_finite_share)
    skipped = isinstance(fallback, dict) and "skipped" in fallback
    return {**report.as_dict(), "fallback": fallback, "fallback_skipped": skipped}


def embed_fallback_level(spark, settings, interval, model_version: str,
                         max_non_finite_share: float = MAX_NON_FINITE_SHARE) -> dict | None:
    """The fallback levels' tables of ``interval`` with ``model_version``, ``k`` =
    ``settings.fallback_clusters`` (0: none, returns None).

    The levels are optional: without the mined item statistics they need (the job run on its
    own, outside the pipeline), with nothing to cluster, or when more than
    ``max_non_finite_share`` of a table's embeddings are NaN or infinite (a representative
    item the model overflows on), they are skipped with a warning and the exact embeddings
    stand alone. Whenever the level is not written (turned off included),
    the interval's tables of an earlier run are removed: the publisher would otherwise serve
    them beside the new exact embeddings."""
    from solaris_lib.errors import EmptyInputError, MissingDependencyError
    from solaris_lib.model.inference import NonFiniteOutputError
    from solaris_lib.storage import is_complete

    layout = DataLayout.from_settings(settings)
    if settings.fallback_clusters == 0:
        clear_fallback_tables(layout, interval)
        return None
    stats = layout.output(MINED, interval, "item_stats")
    reason = None if is_complete(stats) else f"no complete {stats}"
    if reason is None:
        try:
            return infer_cluster_embeddings(spark, settings, interval, model_version,
                                            k=settings.fallback_clusters,
                                            max_non_finite_share=max_non_finite_share)
        except (EmptyInputError, MissingDependencyError, NonFiniteOutputError) as exc:
            reason = str(exc)
    log.warning("hierarchical fallback skipped: %s", reason)
    clear_fallback_tables(layout, interval)
    return {"skipped": reason}


def clear_fallback_tables(layout: DataLayout, interval) -> None:
    """Remove ``interval``'s fallback tables, the item -> cluster table first (the publisher
    serves the level only with both it and the cluster table complete)."""
    from solaris_lib.storage import remove_folder

    for table in (ITEM_CLUSTERS, CLUSTER_EMBEDDINGS, ITEM_PRIORS):
        if remove_folder(layout.output(EMBEDDINGS, interval, table)):
            log.warning("removed %s of an earlier run: this run has no fallback level",
                        layout.output(EMBEDDINGS, interval, table))
