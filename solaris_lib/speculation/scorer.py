"""Score candidates: P(pair is scored in the next interval), learned or heuristic; apply budgets.

Features (all doubles, computed at ``asof``; absent statistics are 0):

================ ==================================================================================
pair_n           log1p(times the pair was scored in the lookback)
pair_decayed     log1p(decayed pair count)
pair_recency     exp(-days since the pair was last scored); 0 for new pairs
pair_clicks      log1p(clicks on the pair)
item_pop         log1p(decayed item count)
item_trend       log(item trend): recent rate over window rate
item_recency     exp(-hours since the item was last scored / 6)
item_age         log1p(hours since the item was first scored)
user_act         log1p(decayed request count of the user)
p_pop            1 - exp(-decayed user requests * item share of requests): chance a popular item
                 reaches this user's requests
p_rep            1 - exp(-decayed pair count)
als              ALS inner product of the pair's factors (0 without factors)
recent_sim       the user's recent-interest query . the item's unit factor (:mod:`recent`; 0
                 without factors)
recent_sim_short the same with the short (6 h half-life) query: the last few requests' interest
audience_sim     the user's unit short query . the item's audience (the unit mean short query of
                 its latest users, :mod:`recent`): places items with few rows, e.g. new campaigns
choice           x_u . y_j of the choice model (:mod:`choice`; 0 without its vectors)
choice_sim_short the user's unit short query in the choice model's item space . the item's unit
                 choice vector (:func:`recent.choice_short_interest`; 0 without)
user_rate        log(the user's requests per day since first seen in the window, the span
                 floored at 6 h); 0 for users without history
faiss            1 when FAISS retrieved the pair, else 0 (with the repeat source on, FAISS pools
                 hold only items new to the user: see :func:`candidates._nearest`)
item_faiss       1 when the item-to-item FAISS source retrieved the pair, else 0 (the same)
cooc             log1p(co-occurrence score)
miss             log1p(reported misses)
================ ==================================================================================

**Heuristic** (used when no labelled previous interval exists): the chance that at least one
source fires, treating them as independent,
``1 - (1 - p_rep)(1 - p_pop)(1 - 0.5 faiss clip(als, 0, 1))(1 - 0.2 [cooc > 0])(1 - 0.5 [miss])``.

**Learned**: Spark MLlib logistic regression (or gradient-boosted trees) on these features, trained
on the candidates of the previous interval with label 1 when the pair was scored in the interval
that followed, each positive weighted by its rows there (coverage counts requests).
"""

from __future__ import annotations

import logging

from solaris_lib.sparkutil import exact_sum
from solaris_lib.speculation.mined import Mined
from solaris_lib.speculation.recent import (
    choice_short_interest,
    recent_queries,
    short_interest,
    unit_items,
    unit_vectors,
)

log = logging.getLogger(__name__)

FEATURES = (
    "pair_n", "pair_decayed", "pair_recency", "pair_clicks", "item_pop", "item_trend",
    "item_recency", "item_age", "user_act", "p_pop", "p_rep", "als", "recent_sim",
    "recent_sim_short", "audience_sim", "faiss", "item_faiss", "cooc", "miss", "choice",
    "choice_sim_short", "user_rate",
)
RATE_FLOOR_S = 6 * 3600.0


def add_features(candidates, mined: Mined, with_als: bool = True):
    """Join the statistics of ``mined`` onto candidates and compute :data:`FEATURES` + heuristic.

    ``with_als`` False skips the factor joins (``als``, ``recent_sim``, ``recent_sim_short``,
    ``audience_sim``, ``choice`` and ``choice_sim_short`` are 0), for runs that do not use them.
    """
    from pyspark.sql import functions as F

    t = float(mined.asof.timestamp())
    total_requests = mined.user_stats.agg(exact_sum(F.col("decayed_requests"))).first()[0] or 1.0
    pairs = mined.pair_stats.select(
        "user_id", "item_id", "times_scored", "clicks", F.col("decayed").alias("pd"),
        F.col("last_seen").cast("double").alias("pl"),
    )
    items = mined.item_stats.select(
        "item_id", F.col("decayed").alias("idec"), "trend",
        F.col("last_seen").cast("double").alias("il"), F.col("first_seen").cast("double").alias("if"),
    )
    span = F.greatest(F.lit(t) - F.col("first_seen").cast("double"), F.lit(RATE_FLOOR_S))
    users = mined.user_stats.select("user_id", F.col("decayed_requests").alias("ur"),
                                    F.log(F.col("requests") * 86400.0 / span).alias("urate"))
    df = candidates.join(pairs, ["user_id", "item_id"], "left").join(F.broadcast(items), "item_id", "left")
    df = df.join(F.broadcast(users), "user_id", "left")
    factor_features = ["als", "recent_sim", "recent_sim_short", "audience_sim", "choice",
                       "choice_sim_short"]
    if with_als:
        df = with_short_scores(with_recent_score(with_als_score(df, mined), mined), mined)
        df = with_choice_scores(df, mined)
    else:
        for name in factor_features:
            df = df.withColumn(name, F.lit(0.0))
    df = df.fillna(0.0, subset=["pd", "ur", "urate", "idec", *factor_features])
    expected = F.col("ur") * F.col("idec") / F.lit(total_requests)
    columns = {
        "pair_n": F.log1p(F.coalesce(F.col("times_scored"), F.lit(0))),
        "pair_decayed": F.log1p("pd"),
        "pair_recency": F.coalesce(F.exp(-(F.lit(t) - F.col("pl")) / 86400.0), F.lit(0.0)),
        "pair_clicks": F.log1p(F.coalesce(F.col("clicks"), F.lit(0))),
        "item_pop": F.log1p("idec"),
        "item_trend": F.log(F.coalesce(F.col("trend"), F.lit(1.0))),
        "item_recency": F.coalesce(F.exp(-(F.lit(t) - F.col("il")) / 21600.0), F.lit(0.0)),
        "item_age": F.log1p(F.coalesce((F.lit(t) - F.col("if")) / 3600.0, F.lit(0.0))),
        "user_act": F.log1p("ur"),
        "p_pop": 1.0 - F.exp(-expected),
        "p_rep": 1.0 - F.exp(-F.col("pd")),
        "als": F.col("als"),
        "recent_sim": F.col("recent_sim"),
        "recent_sim_short": F.col("recent_sim_short"),
        "audience_sim": F.col("audience_sim"),
        "faiss": F.col("faiss_score").isNotNull().cast("double"),
        "item_faiss": F.col("item_faiss_score").isNotNull().cast("double"),
        "cooc": F.log1p(F.coalesce(F.col("cooc_score"), F.lit(0.0))),
        "miss": F.log1p(F.coalesce(F.col("miss_count"), F.lit(0.0))),
        "choice": F.col("choice"),
        "choice_sim_short": F.col("choice_sim_short"),
        "user_rate": F.col("urate"),
    }
    df = df.select("user_id", "item_id", "sources",
                   *[c.cast("double").alias(name) for name, c in columns.items()])
    return df.withColumn("heuristic", heuristic_score())


def _dot(df, users, items, name: str):
    """Add ``name``: inner product of ``users.factor`` and ``items.factor`` (null when missing)."""
    from pyspark.sql import functions as F

    users = users.select("user_id", F.col("factor").alias("uf"))
    items = items.select("item_id", F.col("factor").alias("vf"))
    joined = df.join(F.broadcast(users), "user_id", "left").join(F.broadcast(items), "item_id", "left")
    return joined.withColumn(name, _dot_column("uf", "vf")).drop("uf", "vf")


def _dot_column(left: str, right: str):
    """Column: the inner product of the float arrays ``left`` and ``right`` (null when either is
    null), summed as doubles."""
    from pyspark.sql import functions as F

    return F.aggregate(F.zip_with(left, right, lambda x, y: x * y), F.lit(0.0),
                       lambda acc, v: acc + v.cast("double"))


def with_als_score(df, mined: Mined):
    """Add ``als``: the inner product of the pair's ALS factors (null when either is missing)."""
    from pyspark.sql import functions as F

    if mined.user_factors is None or mined.item_factors is None:
        return df.withColumn("als", F.lit(0.0))
    return _dot(df, mined.user_factors, mined.item_factors, "als")


def with_recent_score(df, mined: Mined):
    """Add ``recent_sim``: the user's recent-interest query . the item's unit factor."""
    from pyspark.sql import functions as F

    queries = recent_queries(mined)
    if queries is None:
        return df.withColumn("recent_sim", F.lit(0.0))
    return _dot(df, queries, unit_items(mined), "recent_sim")


def with_short_scores(df, mined: Mined):
    """Add ``recent_sim_short`` (short query . unit item factor) and ``audience_sim`` (unit short
    query . item audience); 0 when :func:`recent.short_interest` is None."""
    from pyspark.sql import functions as F

    short = short_interest(mined)
    if short is None:
        return df.withColumn("recent_sim_short", F.lit(0.0)).withColumn("audience_sim", F.lit(0.0))
    queries, audiences = short
    df = _dot(df, queries, unit_items(mined), "recent_sim_short")
    return _dot(df, unit_vectors(queries, "user_id"), audiences, "audience_sim")


def with_choice_scores(df, mined: Mined):
    """Add ``choice`` (x_u . y_j) and ``choice_sim_short`` (unit short query in the choice
    space . unit y_j); 0 without choice vectors (the short one also without a short query).
    One join per side: the user's vector and query travel together, as do the item's vector
    and its unit version."""
    from pyspark.sql import functions as F

    if mined.choice_users is None or mined.choice_items is None:
        return df.withColumn("choice", F.lit(0.0)).withColumn("choice_sim_short", F.lit(0.0))
    short = choice_short_interest(mined)
    users = mined.choice_users.select("user_id", F.col("factor").alias("cx"))
    items = mined.choice_items.select("item_id", F.col("factor").alias("cy"))
    if short is not None:
        queries, units = short
        users = users.join(queries.select("user_id", F.col("factor").alias("cq")), "user_id", "left")
        items = items.join(units.select("item_id", F.col("factor").alias("cu")), "item_id", "left")
    joined = df.join(F.broadcast(users), "user_id", "left").join(F.broadcast(items), "item_id", "left")
    joined = joined.withColumn("choice", _dot_column("cx", "cy"))
    short_dot = _dot_column("cq", "cu") if short is not None else F.lit(0.0)
    return joined.withColumn("choice_sim_short", short_dot).drop("cx", "cy", "cq", "cu")


def heuristic_score():
    """Column: the documented fallback score (see the module docstring)."""
    from pyspark.sql import functions as F

    faiss = F.least(F.greatest(F.col("als"), F.lit(0.0)), F.lit(1.0)) * F.col("faiss")
    keep = (
        (1.0 - F.col("p_rep")) * (1.0 - F.col("p_pop")) * (1.0 - 0.5 * faiss)
        * (1.0 - 0.2 * (F.col("cooc") > 0).cast("double"))
        * (1.0 - 0.5 * (F.col("miss") > 0).cast("double"))
    )
    return (1.0 - keep).cast("double")


def pair_rows(logs):
    """(user_id, item_id, rows double): each pair's rows in ``logs``."""
    from pyspark.sql import functions as F

    return logs.groupBy("user_id", "item_id").agg(F.count(F.lit(1)).cast("double").alias("rows"))


def label(features, future_logs):
    """Add ``rows`` (the pair's rows in ``future_logs``, 0 when absent) and ``label`` (1.0 when
    ``rows`` > 0, else 0.0)."""
    from pyspark.sql import functions as F

    joined = features.join(pair_rows(future_logs), ["user_id", "item_id"], "left").fillna(
        0.0, subset=["rows"])
    return joined.withColumn("label", (F.col("rows") > 0).cast("double"))


def train(labelled, seed: int = 7, max_rows: int = 500_000, kind: str = "logistic"):
    """Fit the scorer on labelled candidates (:func:`label`); returns the fitted pipeline model
    or None.

    Each positive weighs its ``rows``: coverage counts requests, so a pair scored ten times in
    the label window matters ten times as much as a pair scored once (the weighted fit ranks by
    about the expected rows, not just P(scored at least once); on the default world with the
    global allocation and ``faiss_k`` 2055, 0.885 -> 0.888 in an offline replay).

    ``kind``: "logistic" (the default: measured slightly better and much faster than trees on
    the default world, 0.815 vs 0.809 coverage) or "gbt" (30 trees of depth 5).

    None when the labels are all one class (nothing to learn). Rows beyond ``max_rows`` are
    sampled (by hash, see :func:`deterministic_sample`) to bound training time.
    """
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import GBTClassifier, LogisticRegression
    from pyspark.ml.feature import VectorAssembler

    counts = {r["label"]: r["count"] for r in labelled.groupBy("label").count().collect()}
    positives, total = counts.get(1.0, 0), sum(counts.values())
    if positives == 0 or positives == total:
        log.warning("training labels are one class (%d of %d positive): no learned scorer",
                    positives, total)
        return None
    labelled = deterministic_sample(labelled, max_rows / total, seed).cache()
    if kind == "gbt":
        estimator = GBTClassifier(featuresCol="features", labelCol="label", weightCol="weight",
                                  maxIter=30, maxDepth=5, stepSize=0.2, seed=seed)
    else:
        estimator = LogisticRegression(featuresCol="features", labelCol="label",
                                       weightCol="weight", maxIter=30, regParam=1e-4)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=list(FEATURES), outputCol="features"),
                                estimator])
    model = pipeline.fit(labelled)
    labelled.unpersist()
    fitted = model.stages[-1]
    weights = fitted.featureImportances.toArray() if kind == "gbt" else fitted.coefficients
    log.info("learned %s scorer on %d candidates (%.1f%% positive): %s", kind, total,
             100.0 * positives / total,
             ", ".join(f"{n}={w:+.3f}" for n, w in zip(FEATURES, weights, strict=True)))
    return model


def deterministic_sample(labelled, fraction: float, seed: int):
    """Rows kept by a hash of (user, item, seed) below ``fraction``, in one sorted partition.

    The same rows in the same order whatever the upstream partitioning, so that a rerun fits the
    same model (tree learners sample their split candidates from the data in order).
    """
    from pyspark.sql import functions as F

    if fraction < 1.0:
        bucket = F.abs(F.xxhash64("user_id", "item_id", F.lit(seed))) % 1_000_000
        labelled = labelled.filter(bucket < F.lit(int(fraction * 1_000_000)))
    ordered = labelled.orderBy("user_id", "item_id").coalesce(1)
    weight = F.greatest(F.col("rows"), F.lit(1.0)).alias("weight")
    return ordered.select("label", weight, *FEATURES)


def score(features, model):
    """Add ``score`` (double in [0, 1]): the model's probability, or the heuristic when None."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    if model is None:
        return features.withColumn("score", F.col("heuristic"))
    scored = model.transform(features)
    return scored.withColumn("score", vector_to_array("probability")[1].cast("double")).drop(
        "features", "rawPrediction", "probability", "prediction"
    )


def apply_budgets(scored, per_user: int, global_cap: int | None):
    """Keep each user's ``per_user`` best pairs, then the ``global_cap`` best overall.

    Ties break on item id then user id, so the selection is deterministic.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    best = Window.partitionBy("user_id").orderBy(F.col("score").desc(), "item_id")
    kept = scored.withColumn("rank", F.row_number().over(best)).filter(F.col("rank") <= per_user)
    if global_cap is not None:
        kept = kept.orderBy(F.col("score").desc(), "user_id", "item_id").limit(global_cap)
    return kept


