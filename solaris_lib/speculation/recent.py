"""The user's recent interest in ALS item space: the query of the ``item_faiss`` source.

``query(u) = sum_i decayed(u, i) * unit(v_i) / sum_i decayed(u, i)`` over the items ``i`` the user
was scored on in the lookback window (``decayed``: the pair's time-decayed count, half-life
``MineConfig.half_life``; ``unit(v_i)``: item i's ALS factor scaled to unit L2 norm). The inner
product ``query(u) . unit(v_j)`` is the recency-weighted mean of item j's cosine similarities to
the user's items, in [-1, 1] whatever the user's activity (item-to-item neighbours of the user's
recent items, searched with one FAISS query per user; the positive scale does not change them). It follows a drifting interest faster than the user's ALS factor, which weighs the whole
window alike.
"""

from __future__ import annotations

from solaris_lib.speculation.candidates import Mined


def unit_item_factors(item_factors):
    """(item_id, factor): ALS item factors scaled to unit L2 norm (zero vectors stay zero)."""
    from pyspark.sql import functions as F

    norm = F.sqrt(F.aggregate(F.transform("factor", lambda x: x * x), F.lit(0.0),
                              lambda acc, v: acc + v.cast("double")))
    scaled = F.transform("factor", lambda x: (x / F.greatest(norm, F.lit(1e-12))).cast("float"))
    return item_factors.select("item_id", scaled.alias("factor"))


def _sum_of_user(frame):
    """applyInPandas per user: the decayed-weighted mean of unit factors (summed in item order;
    a user whose weights sum to 0 gets the zero vector)."""
    import numpy as np
    import pandas as pd

    frame = frame.sort_values("item_id", kind="stable")
    vectors = np.stack(frame["factor"].to_numpy()).astype(np.float64)
    weights = frame["decayed"].to_numpy(np.float64)
    query = (vectors * weights[:, None]).sum(axis=0) / max(weights.sum(), 1e-12)
    return pd.DataFrame({"user_id": frame["user_id"].to_numpy(np.int64)[:1],
                         "factor": [query.astype(np.float32)]})


def recent_queries(mined: Mined):
    """(user_id, factor array<float>) recent-interest queries of known users; None without factors.

    Cached on ``mined`` (both the item_faiss source and the ``recent_sim`` feature use it).
    """
    from pyspark.sql import functions as F

    if mined.item_factors is None:
        return None
    if mined.recent is None:
        units = unit_item_factors(mined.item_factors)
        weighted = mined.pair_stats.select("user_id", "item_id", "decayed").join(units, "item_id")
        queries = weighted.groupBy("user_id").applyInPandas(
            _sum_of_user, "user_id long, factor array<float>")
        mined.recent = (queries.join(mined.user_stats.select("user_id"), "user_id")
                        .select("user_id", F.col("factor")).cache(), units.cache())
    return mined.recent[0]


def unit_items(mined: Mined):
    """The unit item factors that :func:`recent_queries` used (None without factors)."""
    return None if recent_queries(mined) is None else mined.recent[1]
