"""Mine a log window into the statistics speculation needs (pure Spark transforms).

Every function takes the validated log rows of ``[end - lookback, end)`` (the contract schema,
see :mod:`solaris_lib.logs.schema`) and ``end`` (the run's ``asof``). Decayed counts weigh a row
of age ``a`` by ``2 ** (-a / half_life)``.

Tables (``mined/<table>/interval=KEY``):

=============== =====================================================================================
user_history    user_id, item_ids list<int64>, ts list<timestamp>, clicked list<bool>, asof
                (the newest ``max_history`` events and the newest ``max_history_clicks`` clicks)
pair_stats      user_id, item_id, times_scored, times_shown, clicks, first_seen, last_seen, decayed,
                recent_decayed (the same sum with the short ``recent_half_life``)
item_stats      item_id, popularity (rows), users, decayed, recent (rows in the trend window), trend,
                first_seen, last_seen, short_rows (rows in the short window)
user_stats      user_id, requests, rows, decayed_requests, first_seen, last_seen
cooccurrence    item_id, neighbor_id, users (users scored on both), rank (1 = most shared)
=============== =====================================================================================
"""

from __future__ import annotations

import logging
import math
from datetime import datetime

from solaris_lib.sparkutil import exact_sum
from solaris_lib.speculation.config import MineConfig

log = logging.getLogger(__name__)

TABLES = ("user_history", "pair_stats", "item_stats", "user_stats", "cooccurrence")
SORT_KEYS = {
    "user_history": ["user_id"],
    "pair_stats": ["user_id", "item_id"],
    "item_stats": ["item_id"],
    "user_stats": ["user_id"],
    "cooccurrence": ["item_id", "rank"],
}


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def decay_weight(end: datetime, half_life_s: float):
    """Column: ``2 ** (-(end - ts) / half_life)`` of each row."""
    from pyspark.sql import functions as F

    age = F.lit(_epoch(end)) - F.col("ts").cast("double")
    return F.exp(-F.lit(math.log(2.0) / half_life_s) * age)


def decayed_sum(end: datetime, half_life_s: float):
    """Aggregate column: the sum of :func:`decay_weight` over a group, as a double.

    Summed exactly (:func:`solaris_lib.sparkutil.exact_sum`): a float sum differs in its last
    bits between runs, so two runs of one interval wrote different bytes.
    """
    return exact_sum(decay_weight(end, half_life_s))


def has_positions(logs) -> bool:
    """True when any row carries a position (then events are the shown rows)."""
    return logs.filter("position IS NOT NULL").limit(1).count() > 0


def user_history(logs, end: datetime, max_history: int, shown_only: bool, max_clicks: int = 0):
    """Each user's newest ``max_history`` events and newest ``max_clicks`` clicked events (the
    foundation model reads both), oldest first, as parallel lists."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = logs.filter("position IS NOT NULL") if shown_only else logs
    newest = Window.partitionBy("user_id").orderBy(
        F.col("ts").desc(), F.col("request_id").desc(), F.col("item_id").desc()
    )
    clicked = F.coalesce(F.col("clicked").cast("int"), F.lit(0))
    clicks_so_far = F.sum(clicked).over(newest.rowsBetween(Window.unboundedPreceding, 0))
    recent = (events.withColumn("_n", F.row_number().over(newest))
              .withColumn("_c", clicks_so_far)
              .filter((F.col("_n") <= max_history) | ((clicked == 1) & (F.col("_c") <= max_clicks))))
    grouped = recent.groupBy("user_id").agg(
        F.sort_array(F.collect_list(F.struct("ts", "request_id", "item_id", "clicked"))).alias("_e")
    )
    return grouped.select(
        "user_id",
        F.col("_e.item_id").cast("array<bigint>").alias("item_ids"),
        F.col("_e.ts").alias("ts"),
        F.col("_e.clicked").alias("clicked"),
        F.lit(end).cast("timestamp").alias("asof"),
    )


def pair_stats(logs, end: datetime, half_life_s: float, recent_half_life_s: float):
    """Per (user, item): how often and when it was scored, shown and clicked; ``decayed`` and
    ``recent_decayed`` weigh its rows with the two half-lives."""
    from pyspark.sql import functions as F

    return logs.groupBy("user_id", "item_id").agg(
        F.count(F.lit(1)).alias("times_scored"),
        F.count("position").alias("times_shown"),
        F.sum(F.col("clicked").cast("long")).alias("clicks"),
        F.min("ts").alias("first_seen"),
        F.max("ts").alias("last_seen"),
        decayed_sum(end, half_life_s).alias("decayed"),
        decayed_sum(end, recent_half_life_s).alias("recent_decayed"),
    )


def item_stats(logs, end: datetime, half_life_s: float, trend_window_s: float, span_s: float,
               short_window_s: float):
    """Per item: popularity (rows), reach, recency, trend (recent rate / window rate) and the
    rows of the short window."""
    from pyspark.sql import functions as F

    since = F.col("ts").cast("double")
    recent = since >= F.lit(_epoch(end) - trend_window_s)
    window_s = max(span_s, trend_window_s)
    stats = logs.groupBy("item_id").agg(
        F.count(F.lit(1)).alias("popularity"),
        F.countDistinct("user_id").alias("users"),
        decayed_sum(end, half_life_s).alias("decayed"),
        F.sum(recent.cast("long")).alias("recent"),
        F.min("ts").alias("first_seen"),
        F.max("ts").alias("last_seen"),
        F.sum((since >= F.lit(_epoch(end) - short_window_s)).cast("long")).alias("short_rows"),
    )
    rate_ratio = window_s / trend_window_s
    return stats.withColumn(
        "trend", (F.col("recent") + F.lit(1.0)) * F.lit(rate_ratio) / (F.col("popularity") + 1.0)
    )


def user_stats(logs, end: datetime, half_life_s: float):
    """Per user: requests, rows, decayed request count and first/last activity."""
    from pyspark.sql import functions as F

    requests = logs.groupBy("user_id", "request_id").agg(
        F.min("ts").alias("ts"), F.count(F.lit(1)).alias("rows")
    )
    return requests.groupBy("user_id").agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum("rows").alias("rows"),
        decayed_sum(end, half_life_s).alias("decayed_requests"),
        F.min("ts").alias("first_seen"),
        F.max("ts").alias("last_seen"),
    )


def cooccurrence(pairs, items_per_user: int, top_n: int):
    """Items scored for the same users: per item, its ``top_n`` neighbours by shared users.

    ``pairs``: pair_stats. Each user contributes their ``items_per_user`` most-scored items
    (ties: smaller item id), which bounds the self-join to ``users * items_per_user ** 2`` rows.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_user = Window.partitionBy("user_id").orderBy(F.col("times_scored").desc(), "item_id")
    top = (
        pairs.withColumn("_n", F.row_number().over(by_user))
        .filter(F.col("_n") <= items_per_user)
        .select("user_id", "item_id")
    )
    left, right = top.alias("a"), top.withColumnRenamed("item_id", "neighbor_id").alias("b")
    joined = left.join(right, "user_id").filter(F.col("item_id") != F.col("neighbor_id"))
    counts = joined.groupBy("item_id", "neighbor_id").agg(F.count(F.lit(1)).alias("users"))
    by_item = Window.partitionBy("item_id").orderBy(F.col("users").desc(), "neighbor_id")
    return (
        counts.withColumn("rank", F.row_number().over(by_item))
        .filter(F.col("rank") <= top_n)
        .select("item_id", "neighbor_id", "users", F.col("rank").cast("int"))
    )


def mine(logs, end: datetime, config: MineConfig) -> dict:
    """All mined tables of one window: ``{table name: DataFrame}``.

    ``logs`` must already be restricted to ``[end - lookback, end)``.
    """
    from pyspark.sql import functions as F

    half_life_s = config.half_life.total_seconds()
    first = logs.agg(F.min(F.col("ts").cast("double"))).first()[0]
    span_s = _epoch(end) - first if first is not None else config.lookback.total_seconds()
    pairs = pair_stats(logs, end, half_life_s, config.recent_half_life.total_seconds())
    return {
        "user_history": user_history(logs, end, config.max_history, has_positions(logs),
                                     config.max_history_clicks),
        "pair_stats": pairs,
        "item_stats": item_stats(
            logs, end, half_life_s, config.trend_window.total_seconds(), span_s,
            config.short_window.total_seconds(),
        ),
        "user_stats": user_stats(logs, end, half_life_s),
        "cooccurrence": cooccurrence(pairs, config.cooc_items_per_user, config.cooc_top_n),
    }
