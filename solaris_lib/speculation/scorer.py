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
choice           x_u . y_j + b_j, the choice model's logit (:mod:`choice`; 0 without its vectors)
choice_sim_short the user's unit short query in the choice model's item space . the item's unit
                 choice vector (:func:`recent.choice_short_interest`; 0 without)
choice_rank      log(the item's rank among the user's candidates by ``choice_sim_short``, 1 the
                 highest; equal values share their mean rank, so a user whose values are all
                 equal, e.g. 0 without a choice query, gets the middle of the list): where the
                 item stands in this user's list
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

**Learned**: a logistic regression on these features (:mod:`logistic`, fitted in numpy on a
hash sample of the candidates), trained on the candidates of the previous interval with label 1
when the pair was scored in the interval that followed, each positive weighted by its rows there
(coverage counts requests).
"""

from __future__ import annotations

import logging

import numpy as np

from solaris_lib.sparkutil import exact_sum
from solaris_lib.speculation import logistic
from solaris_lib.speculation.candidates import flags_of, log_trend, sources_of
from solaris_lib.speculation.factor_scores import PRODUCTS, with_factor_scores
from solaris_lib.speculation.logistic import LinearScorer
from solaris_lib.speculation.mined import Mined

log = logging.getLogger(__name__)

FEATURES = (
    "pair_n", "pair_decayed", "pair_recency", "pair_clicks", "item_pop", "item_trend",
    "item_recency", "item_age", "user_act", "p_pop", "p_rep", "als", "recent_sim",
    "recent_sim_short", "audience_sim", "faiss", "item_faiss", "cooc", "miss", "choice",
    "choice_sim_short", "user_rate", "choice_rank",
)
RATE_FLOOR_S = 6 * 3600.0
SOURCE_VALUES = ("faiss_score", "item_faiss_score", "cooc_score", "miss_count", "popular_score")
BROADCAST_ROWS = 2_000_000  # (user, item) tables up to this size join the candidates by broadcast


def add_features(candidates, mined: Mined, with_als: bool = True):
    """Join the statistics of ``mined`` onto candidates and compute :data:`FEATURES` + heuristic.

    ``with_als`` False skips the factor-space features (``als``, ``recent_sim``,
    ``recent_sim_short``, ``audience_sim``, ``choice``, ``choice_sim_short`` and
    ``choice_rank`` are 0, :mod:`factor_scores`), for runs that do not use them.
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
    candidates = _source_columns(candidates)
    if with_als:
        candidates = with_factor_scores(candidates, mined)
    else:
        candidates = candidates.select("*", *[F.lit(0.0).alias(name) for name in PRODUCTS])
    df = candidates.join(small(pairs, BROADCAST_ROWS), ["user_id", "item_id"], "left")
    df = df.join(F.broadcast(items), "item_id", "left")
    df = df.join(F.broadcast(users), "user_id", "left")
    df = df.fillna(0.0, subset=["pd", "ur", "urate", "idec"])
    expected = F.col("ur") * F.col("idec") / F.lit(total_requests)
    columns = {
        "pair_n": F.log1p(F.coalesce(F.col("times_scored"), F.lit(0))),
        "pair_decayed": F.log1p("pd"),
        "pair_recency": F.coalesce(F.exp(-(F.lit(t) - F.col("pl")) / 86400.0), F.lit(0.0)),
        "pair_clicks": F.log1p(F.coalesce(F.col("clicks"), F.lit(0))),
        "item_pop": F.log1p("idec"),
        "item_trend": log_trend(),
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
    df = df.select("user_id", "item_id", sources_of("source_flags").alias("sources"),
                   "source_flags", "popular_score",
                   *[c.cast("double").alias(name) for name, c in columns.items()])
    rank = rank_within_user("choice_sim_short") if with_als else F.lit(0.0)
    df = df.withColumn("choice_rank", rank)
    return df.withColumn("heuristic", heuristic_score())


def rank_within_user(feature: str):
    """Column: log of the pair's rank among its user's candidates by ``feature`` (not null),
    descending: 0.0 for the best. Pairs of equal value share their mean rank, so the n pairs of
    a user whose values are all equal (0 without a choice query) get log((n + 1) / 2), what a
    random order gives on average, not the best rank."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_user = Window.partitionBy("user_id").orderBy(F.col(feature).desc())
    first = F.rank().over(by_user)  # the tie's best rank
    last = F.count(F.lit(1)).over(by_user)  # the default frame ends after the row's peers
    return F.log((first + last).cast("double") / 2.0)


def _source_columns(candidates):
    """``candidates`` with ``source_flags`` (from ``sources`` when absent) instead of the
    ``sources`` array (rebuilt from the flags at the end: arrays are slow to ship to Python),
    and null source values where a column is absent (candidates built by hand)."""
    from pyspark.sql import functions as F

    if "source_flags" not in candidates.columns:
        candidates = candidates.withColumn("source_flags", flags_of("sources"))
    for name in SOURCE_VALUES:
        if name not in candidates.columns:
            candidates = candidates.withColumn(name, F.lit(None).cast("double"))
    return candidates.drop("sources")


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


def small(frame, rows: int):
    """``frame`` with a broadcast hint when it has at most ``rows`` rows (then a join with it
    leaves the other side where it is, without a shuffle), else ``frame``."""
    from pyspark.sql import functions as F

    return F.broadcast(frame) if frame.count() <= rows else frame


def pair_rows(logs):
    """(user_id, item_id, rows double): each pair's rows in ``logs``."""
    from pyspark.sql import functions as F

    return logs.groupBy("user_id", "item_id").agg(F.count(F.lit(1)).cast("double").alias("rows"))


def label(features, future_logs):
    """Add ``rows`` (the pair's rows in ``future_logs``, 0 when absent) and ``label`` (1.0 when
    ``rows`` > 0, else 0.0)."""
    from pyspark.sql import functions as F

    joined = features.join(small(pair_rows(future_logs), BROADCAST_ROWS), ["user_id", "item_id"], "left").fillna(
        0.0, subset=["rows"])
    return joined.withColumn("label", (F.col("rows") > 0).cast("double"))


def training_sample(labelled, seed: int = 7, max_rows: int = 500_000):
    """A pandas frame of at most about ``max_rows`` labelled candidates (a hash sample of
    (user, item, seed)) with user_id, item_id, ``label``, ``rows``, ``half`` (a hash of the
    user: the validation folds) and :data:`FEATURES`, sorted by (user, item); None when the
    labels are all one class (nothing to learn)."""
    from pyspark.sql import functions as F

    counts = {r["label"]: r["count"] for r in labelled.groupBy("label").count().collect()}
    positives, total = counts.get(1.0, 0), sum(counts.values())
    if positives == 0 or positives == total:
        log.warning("training labels are one class (%d of %d positive): no learned scorer",
                    positives, total)
        return None
    fraction = max_rows / total
    if fraction < 1.0:
        bucket = F.abs(F.xxhash64("user_id", "item_id", F.lit(seed))) % 1_000_000
        labelled = labelled.filter(bucket < F.lit(int(fraction * 1_000_000)))
    frame = labelled.select("user_id", "item_id", "label", "rows", user_half(seed).alias("half"),
                            *FEATURES).toPandas()
    return frame.sort_values(["user_id", "item_id"], kind="stable", ignore_index=True)


def user_half(seed: int):
    """Column: 0 or 1 by a hash of the user id (the two validation folds)."""
    from pyspark.sql import functions as F

    return F.abs(F.xxhash64("user_id", F.lit(seed))) % 2


def fit_sample(sample) -> LinearScorer | None:
    """The logistic regression fitted on a :func:`training_sample` frame (None: no sample or
    one class).

    Each positive weighs its ``rows``: coverage counts requests, so a pair scored ten times in
    the label window matters ten times as much as a pair scored once (the weighted fit ranks by
    about the expected rows, not just P(scored at least once); on the default world with the
    global allocation and ``faiss_k`` 2055, 0.885 -> 0.888 in an offline replay). Trees were
    measured no better (0.809 against 0.815; LightGBM offline +0.001) and much slower."""
    if sample is None or sample["label"].nunique() < 2:
        return None
    model = fit_rows(sample[list(FEATURES)].to_numpy(np.float64),
                     sample["rows"].to_numpy(np.float64), FEATURES)
    log.info("learned scorer on %d candidates (%.1f%% positive): %s", len(sample),
             100.0 * sample["label"].mean(), model.describe())
    return model


def fit_rows(x: np.ndarray, rows: np.ndarray, names=FEATURES) -> LinearScorer:
    """The logistic regression on ``x`` (n, k) with :func:`label`'s labels (``rows`` (n,) > 0),
    each positive weighted by its ``rows`` (:func:`fit_sample`)."""
    return logistic.fit(x, (rows > 0).astype(np.float64), np.maximum(rows, 1.0), names)


def train(labelled, seed: int = 7, max_rows: int = 500_000) -> LinearScorer | None:
    """The learned scorer fitted on labelled candidates (:func:`label`), or None."""
    return fit_sample(training_sample(labelled, seed, max_rows))


def out_of_fold(labelled, sample, seed: int = 7):
    """``labelled`` with ``score_learned``: each user's pairs scored by a model fitted on the
    other half of the users (:func:`user_half`; ``sample``: :func:`training_sample`), so that
    the learned scorer is validated on users it did not see, like the rankings that fit
    nothing; null where a half's labels are one class."""
    from pyspark.sql import functions as F

    missing = F.lit(None).cast("double")
    models = [fit_sample(sample[sample["half"] != fold]) if sample is not None else None
              for fold in (0, 1)]
    scores = [m.probability() if m is not None else missing for m in models]
    return labelled.withColumn("score_learned", F.when(user_half(seed) == 0, scores[0])
                               .otherwise(scores[1]))


def score(features, model: LinearScorer | None):
    """Add ``score`` (double in [0, 1]): the model's probability, or the heuristic when None."""
    from pyspark.sql import functions as F

    return features.withColumn("score", F.col("heuristic") if model is None
                               else model.probability())


def apply_budgets(scored, per_user: int, global_cap: int | None):
    """Keep each user's ``per_user`` best pairs, then the ``global_cap`` best overall.

    Ties break on item id then user id, so the selection is deterministic. A null or NaN
    score is never kept (Spark sorts NaN above every number; the validation's numpy copy,
    :func:`selection.select`, drops it).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    best = Window.partitionBy("user_id").orderBy(F.col("score").desc(), "item_id")
    scored = scored.filter(F.col("score").isNotNull() & ~F.isnan("score"))
    kept = scored.withColumn("rank", F.row_number().over(best)).filter(F.col("rank") <= per_user)
    if global_cap is not None:
        kept = kept.orderBy(F.col("score").desc(), "user_id", "item_id").limit(global_cap)
    return kept


