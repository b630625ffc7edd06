"""Retrieval factors: Spark MLlib ALS with implicit feedback over the lookback window.

Output ``retrieval/interval=KEY/users`` (user_id int64, factor array<float>) and
``retrieval/interval=KEY/items`` (item_id int64, factor array<float>), ``rank`` floats each.
The implicit rating of a (user, item) is ``log1p(times scored) + 2 * clicks``.
The retrieval stage also fits the choice model (:mod:`choice`) on the same window:
``retrieval/interval=KEY/choice_users`` (the same schema) and ``choice_items`` (with ``bias``).
"""

from __future__ import annotations

import logging

from solaris_lib.speculation.config import RetrievalConfig

log = logging.getLogger(__name__)


def implicit_ratings(logs):
    """(user_id, item_id, rating) from log rows; ids must fit ALS's int32."""
    from pyspark.sql import functions as F

    pairs = logs.groupBy("user_id", "item_id").agg(
        F.count(F.lit(1)).alias("n"),
        F.coalesce(F.sum(F.col("clicked").cast("long")), F.lit(0)).alias("c"),
    )
    return pairs.select(
        "user_id", "item_id", (F.log1p("n") + 2.0 * F.col("c")).cast("float").alias("rating")
    )


def _dense_index(ratings, column: str, index: str):
    """(``column``, ``index``): the distinct ids of ``column`` numbered 0..n-1 in id order.

    Numbered across partitions (``zipWithIndex`` on the sorted ids, which counts each
    partition once), not by a window over one partition, so that millions of users do not
    funnel through one task. The ids are cached first: the numbering reads them twice.
    """
    ids = ratings.select(column).distinct().orderBy(column).cache()
    numbered = ids.rdd.zipWithIndex().map(lambda pair: (pair[0][0], pair[1]))
    frame = ratings.sparkSession.createDataFrame(numbered, f"{column} long, {index} long")
    frame = frame.withColumn(index, frame[index].cast("int")).cache()
    frame.count()
    ids.unpersist()
    return frame


def _index_ids(ratings):
    """ALS needs int32 ids: map the int64 ids to dense indices (deterministic order); both
    frames are cached."""
    return _dense_index(ratings, "user_id", "u"), _dense_index(ratings, "item_id", "i")


MIN_BLOCKS, MAX_BLOCKS = 2, 1000


def als_blocks(pairs: int, config: RetrievalConfig) -> int:
    """ALS's user and item block count for ``pairs`` rated pairs: one per
    ``config.pairs_per_block``, 2 to 1,000. MLlib's default of 10 blocks costs a small window
    twice the time of 2 (each sweep runs a task per block and stage) and parallelises a large
    one over 10 tasks only. The count follows the data, not the cluster's size: the initial
    factors are drawn per block, so a cluster resized between reruns fits from the same
    start."""
    return int(min(MAX_BLOCKS, max(MIN_BLOCKS, -(-pairs // config.pairs_per_block))))


def train_als(logs, config: RetrievalConfig):
    """Fit ALS on ``logs``; returns (user_factors, item_factors) DataFrames, or (None, None) if
    empty. Both are cached (and computed); the caller unpersists them when done."""
    from pyspark.ml.recommendation import ALS
    from pyspark.sql import functions as F

    ratings = implicit_ratings(logs).cache()
    if ratings.limit(1).count() == 0:
        log.warning("no interactions in the retrieval window: no factors trained")
        ratings.unpersist()
        return None, None
    users, items = _index_ids(ratings)
    indexed = ratings.join(users, "user_id").join(items, "item_id")
    pairs = ratings.count()
    blocks = als_blocks(pairs, config)
    als = ALS(
        rank=config.rank, maxIter=config.max_iter, regParam=config.reg, alpha=config.alpha,
        implicitPrefs=True, userCol="u", itemCol="i", ratingCol="rating", seed=config.seed,
        nonnegative=False, coldStartStrategy="drop", numUserBlocks=blocks, numItemBlocks=blocks,
    )
    model = als.fit(indexed)
    user_factors = model.userFactors.join(users, F.col("id") == F.col("u")).select(
        "user_id", F.col("features").cast("array<float>").alias("factor")
    )
    item_factors = model.itemFactors.join(items, F.col("id") == F.col("i")).select(
        "item_id", F.col("features").cast("array<float>").alias("factor")
    )
    user_factors, item_factors = user_factors.cache(), item_factors.cache()
    log.info("ALS rank %d trained on %d pairs in %d blocks: %d user and %d item factors",
             config.rank, pairs, blocks, user_factors.count(), item_factors.count())
    for frame in (ratings, users, items):
        frame.unpersist()
    return user_factors, item_factors


def train_factors(logs, end, config: RetrievalConfig) -> tuple:
    """Everything the retrieval stage fits on ``logs`` (windowed, ending at ``end``):
    (ALS user factors, ALS item factors, choice user vectors, choice item vectors), each a cached
    DataFrame or None (:func:`train_als`, :func:`choice.train_choice`)."""
    from solaris_lib.speculation.choice import train_choice

    return (*train_als(logs, config), *train_choice(logs, end, config))
