"""Candidate (user, item) pairs from several sources, each tagged, with the scorer's raw inputs.

All sources draw from the mined tables of one ``asof`` time (the end of the history window):

=============== ==================================================================================
repeat          pairs the user was scored on in the lookback window (pair_stats)
faiss           the user's nearest live items by the choice model's logit (``x_u . y_j + b_j``,
                see :mod:`choice`), by ALS factor when the retrieval has no choice vectors (see
                :mod:`faiss_index`)
item_faiss      item-to-item: nearest live items (cosine of ALS item factors) to the user's
                recent items, one query per user (see :mod:`recent`)
cooccurrence    neighbours (shared users) of the user's most recent items
popular         the most popular live items (by a measure chosen on the labelled previous interval,
                see :mod:`popular`) for every known user; with repeat on, new to the user
miss            pairs the online client reported as misses (Redis stream, when present)
=============== ==================================================================================

Only known users (in ``user_stats``) and live items (seen within ``live_window`` before
``asof``, see :func:`live_items`) are candidates; repeats of items no longer live are dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from solaris_lib.sparkutil import exact_sum
from solaris_lib.speculation.choice import logit_vectors
from solaris_lib.speculation.config import SOURCES, SpeculateConfig
from solaris_lib.speculation.mined import Mined
from solaris_lib.speculation.popular import available_measures, popular_candidates
from solaris_lib.speculation.recent import recent_queries, unit_items

log = logging.getLogger(__name__)

_RECENT_ITEMS_PER_USER = 20
SOURCE_FLAGS = {source: 1 << bit for bit, source in enumerate(SOURCES)}  # bits of source_flags


@dataclass
class CandidateSet:
    """Tagged candidates ``(user_id, item_id, sources, source feature columns)`` and FAISS facts."""

    pairs: object
    faiss_kind: str | None = None
    faiss_recall: float | None = None
    cached: tuple = ()  # frames cached while gathering (live items, seen lists): SpeculationResult


def live_items(mined: Mined, config: SpeculateConfig):
    """item_stats rows of the items still live at ``asof``.

    An item is live when it was seen within ``live_window`` before ``asof``, or within
    ``live_gaps`` of its own mean gap between rows (``(last_seen - first_seen) / (rows - 1)``;
    an item seen once has no gap yet: ``live_window`` alone). A campaign seen every few
    minutes is over once it stops for ``live_window``; a film rated every few days in a
    ratings log is not. When fewer than twice the budget are live, every item of the window
    counts as live.
    """
    from pyspark.sql import functions as F

    asof = mined.asof.timestamp()
    last = F.col("last_seen").cast("double")
    gap = ((last - F.col("first_seen").cast("double"))
           / F.greatest(F.col("popularity") - 1, F.lit(1)))
    window = F.lit(config.live_window.total_seconds())
    patience = F.when(F.col("popularity") <= 1, window).otherwise(
        F.greatest(window, F.lit(config.live_gaps) * gap))
    live = mined.item_stats.filter(last >= F.lit(asof) - patience)
    needed = 2 * max(config.budget_per_user, config.popular_count())  # not the FAISS depth
    count = live.count()
    if count < needed:
        log.info("only %d items live at %s: every item of the window is live", count,
                 mined.asof.isoformat())
        return mined.item_stats
    return live


def calibrate_live_window(past: Mined, labels, config: SpeculateConfig) -> timedelta:
    """``live_window``, widened to the silence that the previous interval's rows needed.

    ``past``: the mined tables as of the previous interval's end; ``labels``: the log rows of
    the interval that followed it. An item's silence is ``past.asof - last_seen`` (whole hours).
    Returns the smallest silence ``s`` such that the items silent longer than ``s`` carried at
    most ``live_tail_share`` of the labelled rows on items of the window, or ``live_window``
    when that is longer. Campaign logs (items over once they stop) keep the default window; in
    a ratings log, where a film rated three weeks ago is rated again tomorrow, it grows to weeks.
    """
    from pyspark.sql import functions as F

    if config.live_tail_share <= 0:
        return config.live_window
    silence = F.floor((F.lit(past.asof.timestamp()) - F.col("last_seen").cast("double")) / 3600)
    rows = labels.groupBy("item_id").agg(F.count(F.lit(1)).alias("rows"))
    by_hour = (past.item_stats.select("item_id", silence.cast("long").alias("hours"))
               .join(rows, "item_id").groupBy("hours").agg(F.sum("rows").alias("rows")).collect())
    total = sum(r["rows"] for r in by_hour)
    tail, needed = 0, 0
    for hours, count in sorted(((r["hours"], r["rows"]) for r in by_hour), reverse=True):
        if tail + count > config.live_tail_share * total:
            needed = hours + 1
            break
        tail += count
    window = max(config.live_window, timedelta(hours=needed))
    log.info("live window %.1f days: the previous interval's rows needed items silent up to %d h "
             "(%d of its %d rows on items of its window were on items silent longer, at most "
             "%.1f%% allowed)", window.total_seconds() / 86400, needed, tail, total,
             100 * config.live_tail_share)
    return window


def repeat_candidates(mined: Mined, live):
    from pyspark.sql import functions as F

    return mined.pair_stats.join(live.select("item_id"), "item_id").select(
        "user_id", "item_id", F.lit("repeat").alias("source"), F.lit(None).cast("double").alias("v")
    )


def cooccurrence_candidates(mined: Mined, live, per_user: int):
    """Neighbours of the user's recent items, scored by sum(shared users * recency weight)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    recent = Window.partitionBy("user_id").orderBy(F.col("decayed").desc(), "item_id")
    seeds = (
        mined.pair_stats.withColumn("_n", F.row_number().over(recent))
        .filter(F.col("_n") <= _RECENT_ITEMS_PER_USER)
        .select("user_id", "item_id", F.col("decayed").alias("w"))
    )
    neighbours = seeds.join(mined.cooccurrence, "item_id").join(
        live.select(F.col("item_id").alias("neighbor_id")), "neighbor_id"
    )
    scored = neighbours.groupBy("user_id", "neighbor_id").agg(
        exact_sum(F.col("users") * F.col("w")).alias("v")
    )
    best = Window.partitionBy("user_id").orderBy(F.col("v").desc(), "neighbor_id")
    return (
        scored.withColumn("_n", F.row_number().over(best))
        .filter(F.col("_n") <= per_user)
        .select("user_id", F.col("neighbor_id").alias("item_id"),
                F.lit("cooccurrence").alias("source"), F.col("v").cast("double"))
    )


def _nearest(spark, mined: Mined, live, config: SpeculateConfig, items, users, source: str,
             seen=None):
    """(candidates, kind, recall): each user's ``faiss_count()`` nearest live ``items`` (inner
    product of ``factor`` columns), tagged ``source`` with the score as ``v``.

    With ``seen`` (``(user_id, seen array<long>)``: the window pairs the repeat source proposes
    anyway, see :func:`seen_lists`), those are skipped: the pool holds ``faiss_count()`` items
    new to the user, from the ``2 x faiss_count()`` nearest (fewer when more than half of those
    are the user's own). In a ratings log, where nobody rates a film twice, a fifth of the pools
    were films the user had already rated.
    """
    from functools import partial

    import numpy as np
    from pyspark.sql import functions as F

    from solaris_lib.speculation.faiss_index import build_index, search_users

    frame = items.join(live.select("item_id"), "item_id").toPandas()
    if frame.empty:
        return None, None, None
    frame = frame.sort_values("item_id", kind="stable", ignore_index=True)  # sorted here: no job
    k = config.faiss_count()
    fetch = 2 * k if seen is not None else k
    vectors = np.stack(frame["factor"].to_numpy()).astype(np.float32)
    users = users.join(mined.user_stats.select("user_id"), "user_id")
    built = build_index(frame["item_id"].to_numpy(np.int64), vectors,
                        exact_threshold=config.exact_threshold, k=fetch,
                        queries=partial(_recall_queries, users), seed=config.seed)
    if seen is not None:
        users = users.join(seen, "user_id", "left")
    found = search_users(spark, users, built, k, fetch)
    tagged = found.select("user_id", "item_id", F.lit(source).alias("source"),
                          F.col("faiss_score").alias("v"))
    return tagged, built.kind, built.recall


def _recall_queries(users):
    """(<= 500, dim) float32: the query vectors of the first 500 users by id, on which an IVF
    index measures its recall (:func:`faiss_index.build_index` calls it for an IVF index
    only); None without users."""
    import numpy as np

    sample = users.orderBy("user_id").limit(500).toPandas()
    return np.stack(sample["factor"].to_numpy()).astype(np.float32) if len(sample) else None


def faiss_feature(mined: Mined) -> str:
    """The feature whose inner product the faiss source searches: ``choice``, the choice model's
    logit ``x_u . y_j + b_j`` (:func:`choice.logit_vectors`: the items the model expects the user
    to be scored on most, docs/speculation.md) at the item's current rate (plus ``item_trend``,
    :func:`faiss_vectors`), when ``mined`` has choice vectors with their bias; else ``als``
    (choice vectors written before the bias: ``x_u . y_j`` alone ranks poorly)."""
    items = mined.choice_items
    has_bias = mined.choice_users is not None and items is not None and "bias" in items.columns
    return "choice" if has_bias else "als"


def log_trend():
    """Column: the log of ``item_stats.trend`` (the last ``trend_window``'s rate over the
    window's), 0 for items without statistics: the scorer's ``item_trend`` and the shift of the
    faiss source's item vectors (:func:`faiss_vectors`)."""
    from pyspark.sql import functions as F

    return F.log(F.coalesce(F.col("trend"), F.lit(1.0)))


def faiss_vectors(mined: Mined) -> tuple:
    """(user vectors, item vectors) of :func:`faiss_feature` (None when absent).

    For ``choice`` the inner product is ``x_u . y_j + b_j + item_trend`` (:func:`log_trend`):
    the bias averages the window's rows (with the choice model's half-life), the trend moves an
    item whose delivery ramps up, or winds down, to its current rate."""
    from pyspark.sql import functions as F

    if faiss_feature(mined) != "choice":
        return mined.user_factors, mined.item_factors
    users, items = logit_vectors(mined.choice_users, mined.choice_items)
    last = F.element_at("factor", -1) + log_trend()
    shifted = F.concat(F.slice("factor", 1, F.size("factor") - 1), F.array(last.cast("float")))
    trend = mined.item_stats.select("item_id", "trend")
    return users, items.join(trend, "item_id", "left").select("item_id", shifted.alias("factor"))


def faiss_score(feature: str):
    """Column of the inner product the faiss source searched (:func:`faiss_vectors`), from the
    scorer's features (:data:`scorer.FEATURES`): ``choice + item_trend``, or ``als``."""
    from pyspark.sql import functions as F

    return F.col(feature) + F.col("item_trend") if feature == "choice" else F.col(feature)


def faiss_candidates(spark, mined: Mined, live, config: SpeculateConfig, seen=None):
    """(candidates, kind, recall): nearest live items to each known user by
    :func:`faiss_feature` (``seen``: see :func:`_nearest`)."""
    feature = faiss_feature(mined)
    users, items = faiss_vectors(mined)
    if users is None or items is None:
        log.info("no retrieval factors: the faiss source is skipped")
        return None, None, None
    log.info("faiss source: nearest live items by %s vectors", feature)
    return _nearest(spark, mined, live, config, items, users, "faiss", seen)


def item_faiss_candidates(spark, mined: Mined, live, config: SpeculateConfig, seen=None):
    """Nearest live items (cosine) to each known user's recent-interest query (recent.py)."""
    queries = recent_queries(mined)
    if queries is None:
        log.info("no retrieval factors: the item_faiss source is skipped")
        return None
    return _nearest(spark, mined, live, config, unit_items(mined), queries, "item_faiss",
                    seen)[0]


def seen_lists(mined: Mined):
    """(user_id, seen array<long>): each known user's window items, which the repeat source
    proposes and the popular and FAISS sources then skip (built once per gather, cached)."""
    from pyspark.sql import functions as F

    return mined.pair_stats.groupBy("user_id").agg(F.collect_list("item_id").alias("seen")).cache()


def miss_candidates(mined: Mined, misses, live):
    """Reported misses (user_id, item_id) of known users and live items."""
    from pyspark.sql import functions as F

    counted = misses.groupBy("user_id", "item_id").agg(F.count(F.lit(1)).cast("double").alias("v"))
    return counted.join(mined.user_stats.select("user_id"), "user_id").join(
        live.select("item_id"), "item_id"
    ).select("user_id", "item_id", F.lit("miss").alias("source"), "v")


def gather(spark, mined: Mined, config: SpeculateConfig, misses=None) -> CandidateSet:
    """Union of the enabled sources, one row per (user, item) with its sources and source values."""
    from functools import reduce

    from pyspark.sql import functions as F

    live = live_items(mined, config).cache()
    cached = [live]
    parts, kind, recall = [], None, None
    repeats = "repeat" in config.sources  # the other sources then skip the user's own pairs
    if repeats:
        parts.append(repeat_candidates(mined, live))
    seen = None
    if repeats and {"popular", "faiss", "item_faiss"} & set(config.sources):
        seen = seen_lists(mined)
        cached.append(seen)
    if "popular" in config.sources:
        parts.append(popular_candidates(mined, live, config.popular_count(), seen,
                                        available_measures(mined, config)[0]))
    if "cooccurrence" in config.sources:
        parts.append(cooccurrence_candidates(mined, live, config.cooc_count()))
    if "faiss" in config.sources:
        found, kind, recall = faiss_candidates(spark, mined, live, config, seen)
        if found is not None:
            parts.append(found)
    if "item_faiss" in config.sources:
        found = item_faiss_candidates(spark, mined, live, config, seen)
        if found is not None:
            parts.append(found)
    if "miss" in config.sources and misses is not None:
        parts.append(miss_candidates(mined, misses, live))
    if not parts:
        schema = "user_id long, item_id long, source string, v double"
        parts.append(spark.createDataFrame([], schema))
    union = reduce(lambda a, b: a.unionByName(b), parts)
    flag = F.lit(0)
    for source, bit in SOURCE_FLAGS.items():
        flag = F.when(F.col("source") == source, F.lit(bit)).otherwise(flag)
    pivot = union.groupBy("user_id", "item_id").agg(
        F.bit_or(flag).alias("source_flags"),
        F.max(F.when(F.col("source") == "faiss", F.col("v"))).alias("faiss_score"),
        F.max(F.when(F.col("source") == "item_faiss", F.col("v"))).alias("item_faiss_score"),
        F.max(F.when(F.col("source") == "cooccurrence", F.col("v"))).alias("cooc_score"),
        F.max(F.when(F.col("source") == "miss", F.col("v"))).alias("miss_count"),
        F.max(F.when(F.col("source") == "popular", F.col("v"))).alias("popular_score"),
    )
    return CandidateSet(pivot.withColumn("sources", sources_of("source_flags")), kind, recall,
                        tuple(cached))


def has_source(source: str, flags: str = "source_flags"):
    """Column: whether the pair's ``flags`` (:data:`SOURCE_FLAGS` bits) include ``source``."""
    from pyspark.sql import functions as F

    return F.col(flags).bitwiseAND(F.lit(SOURCE_FLAGS[source])) != 0


def flags_of(sources: str):
    """Column: the :data:`SOURCE_FLAGS` bits of an array<string> ``sources`` column."""
    from pyspark.sql import functions as F

    bits = [F.when(F.array_contains(sources, s), F.lit(bit)).otherwise(F.lit(0))
            for s, bit in SOURCE_FLAGS.items()]
    return sum(bits[1:], bits[0])


def sources_of(flags: str):
    """Column: the sorted source names of the ``flags`` column (array<string>)."""
    from pyspark.sql import functions as F

    return F.array_compact(F.array(*[F.when(has_source(s, flags), F.lit(s))
                                     for s in sorted(SOURCE_FLAGS)]))
