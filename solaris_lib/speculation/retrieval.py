"""Retrieval factors: Spark MLlib ALS with implicit feedback over the lookback window.

Output ``retrieval/interval=KEY/users`` (user_id int64, factor array<float>) and
``retrieval/interval=KEY/items`` (item_id int64, factor array<float>), ``rank`` floats each.
The implicit rating of a (user, item) is ``log1p(times scored) + 2 * clicks``.
"""

from __future__ import annotations

import logging

from solaris_lib.speculation.config import RetrievalConfig

log = logging.getLogger(__name__)

_MAX_ID = 2**31 - 1


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


def _index_ids(ratings):
    """ALS needs int32 ids: map the int64 ids to dense indices (deterministic order)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    users = ratings.select("user_id").distinct()
    users = users.withColumn("u", F.row_number().over(Window.orderBy("user_id")) - 1)
    items = ratings.select("item_id").distinct()
    items = items.withColumn("i", F.row_number().over(Window.orderBy("item_id")) - 1)
    return users, items


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
    users, items = users.cache(), items.cache()
    indexed = ratings.join(users, "user_id").join(items, "item_id")
    als = ALS(
        rank=config.rank, maxIter=config.max_iter, regParam=config.reg, alpha=config.alpha,
        implicitPrefs=True, userCol="u", itemCol="i", ratingCol="rating", seed=config.seed,
        nonnegative=False, coldStartStrategy="drop",
    )
    model = als.fit(indexed)
    user_factors = model.userFactors.join(users, F.col("id") == F.col("u")).select(
        "user_id", F.col("features").cast("array<float>").alias("factor")
    )
    item_factors = model.itemFactors.join(items, F.col("id") == F.col("i")).select(
        "item_id", F.col("features").cast("array<float>").alias("factor")
    )
    user_factors, item_factors = user_factors.cache(), item_factors.cache()
    log.info("ALS rank %d trained on %d pairs: %d user and %d item factors", config.rank,
             ratings.count(), user_factors.count(), item_factors.count())
    for frame in (ratings, users, items):
        frame.unpersist()
    return user_factors, item_factors
