"""The user's recent interest in ALS item space, and each item's recent audience.

``query(u) = sum_i decayed(u, i) * unit(v_i) / sum_i decayed(u, i)`` over the items ``i`` the user
was scored on in the lookback window (``decayed``: the pair's time-decayed count, half-life
``MineConfig.half_life``; ``unit(v_i)``: item i's ALS factor scaled to unit L2 norm). The inner
product ``query(u) . unit(v_j)`` is the recency-weighted mean of item j's cosine similarities to
the user's items, in [-1, 1] whatever the user's activity (item-to-item neighbours of the user's
recent items, searched with one FAISS query per user: the ``item_faiss`` source; the positive
scale does not change them). It follows a drifting interest faster than the user's ALS factor,
which weighs the whole window alike.

The short query is the same mean with ``recent_decayed`` (half-life
``MineConfig.recent_half_life``, 6 h): the interest of the user's last few requests, which is
what the next requests draw from when interests drift (feature ``recent_sim_short``).

An item's audience is ``unit(sum_u recent_decayed(u, j) * unit(short_query(u)))`` over the users
scored on it: where in item space its latest users' interests lie. It needs only a few rows, so it
places a campaign launched hours ago better than its own ALS factor does (that factor is shrunk
towards zero by the regularisation until the item has many rows); feature ``audience_sim`` =
``unit(short_query(u)) . audience(j)``.

The same short query in the choice model's item space (:mod:`choice`): ``choice_sim_short`` =
``unit(short_query_choice(u)) . unit(y_j)``, the recent items' mean direction there.
"""

from __future__ import annotations

import logging

from solaris_lib.speculation.mined import Mined

log = logging.getLogger(__name__)

SHORT_COLUMN = "recent_decayed"


def unit_item_factors(item_factors):
    """(item_id, factor): ALS item factors scaled to unit L2 norm (zero vectors stay zero)."""
    return unit_vectors(item_factors, "item_id")


def unit_vectors(frame, key: str):
    """(key, factor): ``frame``'s ``factor`` arrays scaled to unit L2 norm."""
    return frame.select(key, _unit("factor").alias("factor"))


def _unit(column: str):
    """Column: the float array ``column`` scaled to unit L2 norm (zero vectors stay zero)."""
    from pyspark.sql import functions as F

    norm = F.sqrt(F.aggregate(F.transform(column, lambda x: x * x), F.lit(0.0),
                              lambda acc, v: acc + v.cast("double")))
    return F.transform(column, lambda x: (x / F.greatest(norm, F.lit(1e-12))).cast("float"))


def _weighted_mean(key: str):
    """applyInPandas function per ``key``: the ``weight``-weighted mean of ``factor`` (summed
    in ``other`` order, so reruns add in the same order; zero weights give the zero vector)."""

    def mean(frame):
        import numpy as np
        import pandas as pd

        frame = frame.sort_values("other", kind="stable")
        vectors = np.stack(frame["factor"].to_numpy()).astype(np.float64)
        weights = frame["weight"].to_numpy(np.float64)
        query = (vectors * weights[:, None]).sum(axis=0) / max(weights.sum(), 1e-12)
        return pd.DataFrame({key: frame[key].to_numpy(np.int64)[:1],
                             "factor": [query.astype(np.float32)]})

    return mean


def _mean_by(pairs, key: str, other: str, weight: str, vectors):
    """(key, factor): per ``key``, the mean of ``vectors`` (keyed by ``other``) weighted by the
    pairs' ``weight`` column."""
    from pyspark.sql import functions as F

    weighted = pairs.select(key, F.col(other).alias("other"), F.col(weight).alias("weight")).join(
        vectors.withColumnRenamed(other, "other"), "other")
    return weighted.groupBy(key).applyInPandas(_weighted_mean(key),
                                               f"{key} long, factor array<float>")


def _user_queries(mined: Mined, units, column: str):
    """(user_id, factor) queries of known users from the pairs' ``column`` weights."""
    from pyspark.sql import functions as F

    queries = _mean_by(mined.pair_stats, "user_id", "item_id", column, units)
    return (queries.join(mined.user_stats.select("user_id"), "user_id")
            .select("user_id", F.col("factor")).cache())


def recent_queries(mined: Mined):
    """(user_id, factor array<float>) recent-interest queries of known users; None without factors.

    Cached on ``mined`` (both the item_faiss source and the ``recent_sim`` feature use it).
    """
    if mined.item_factors is None:
        return None
    if mined.recent is None:
        units = unit_item_factors(mined.item_factors).cache()
        mined.recent = (_user_queries(mined, units, "decayed"), units)
    return mined.recent[0]


def unit_items(mined: Mined):
    """The unit item factors that :func:`recent_queries` used (None without factors)."""
    return None if recent_queries(mined) is None else mined.recent[1]


def short_interest(mined: Mined):
    """(short queries, audiences): (user_id, factor) and (item_id, factor at unit norm); None
    without factors or when ``pair_stats`` has no ``recent_decayed`` (mined by an older
    version: the features are then 0). Cached on ``mined``."""

    if unit_items(mined) is None:
        return None
    if SHORT_COLUMN not in mined.pair_stats.columns:
        log.warning("pair_stats has no %s column (mined by an older version): the short-interest"
                    " features are 0; rerun mine_logs for this interval", SHORT_COLUMN)
        return None
    if mined.short is None:
        queries = _user_queries(mined, unit_items(mined), SHORT_COLUMN)
        audiences = _mean_by(mined.pair_stats, "item_id", "user_id", SHORT_COLUMN,
                             unit_vectors(queries, "user_id"))
        mined.short = (queries, unit_vectors(audiences, "item_id").cache())
    return mined.short


def choice_short_interest(mined: Mined):
    """(unit short queries, unit choice item vectors): (user_id, factor) and (item_id, factor)
    in the choice model's space; None without choice vectors or ``recent_decayed``. The queries
    and vectors are cached on ``mined``."""
    if mined.choice_items is None or SHORT_COLUMN not in mined.pair_stats.columns:
        return None
    if mined.choice_short is None:
        units = unit_vectors(mined.choice_items, "item_id").cache()
        mined.choice_short = (_user_queries(mined, units, SHORT_COLUMN), units)
    queries, units = mined.choice_short
    return unit_vectors(queries, "user_id"), units
