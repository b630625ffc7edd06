"""The scorer's factor-space features of every candidate, in one pass over the candidates.

Each feature is an inner product of a user-side and an item-side vector (:data:`PRODUCTS`):

================= =================================== =========================================
feature           user side                           item side
================= =================================== =========================================
als               ALS factor                          ALS factor
recent_sim        recent-interest query (recent.py)   unit ALS factor
recent_sim_short  short-interest query                unit ALS factor
audience_sim      unit short-interest query           the item's audience
choice            [x_u, 1] (choice model)             [y_j, b_j]: the model's logit
choice_sim_short  unit short query in choice space    unit choice vector
================= =================================== =========================================

The vector tables are small beside the candidates (users and items x at most 32 floats), so
they are collected once on the driver, broadcast, and every candidate's six products are
computed with numpy in a ``mapInPandas`` (ids looked up by binary search in the sorted id
arrays). The same tables as broadcast joins with Spark's array functions cost a join and an
interpreted lambda per feature and row. A missing vector (a user or item without a factor, a
retrieval partition without choice vectors) gives 0.
"""

from __future__ import annotations

import logging

import numpy as np

from solaris_lib.speculation import vectors
from solaris_lib.speculation.choice import logit_vectors
from solaris_lib.speculation.mined import Mined
from solaris_lib.speculation.recent import (
    choice_short_interest,
    recent_queries,
    short_interest,
    unit_items,
    unit_vectors,
)

log = logging.getLogger(__name__)

PRODUCTS = {
    "als": ("als", "als"),
    "recent_sim": ("recent", "unit"),
    "recent_sim_short": ("short", "unit"),
    "audience_sim": ("short_unit", "audience"),
    "choice": ("choice", "choice"),
    "choice_sim_short": ("choice_short", "choice_unit"),
}


def vector_frames(mined: Mined) -> tuple[dict, dict]:
    """({user-side name: (user_id, factor) DataFrame}, {item-side name: (item_id, factor)}) of
    the vectors ``mined`` has (names of :data:`PRODUCTS`; absent ones left out)."""
    users, items = {}, {}
    if mined.user_factors is not None and mined.item_factors is not None:
        users["als"], items["als"] = mined.user_factors, mined.item_factors
    if recent_queries(mined) is not None:
        users["recent"], items["unit"] = recent_queries(mined), unit_items(mined)
        short = short_interest(mined)
        if short is not None:
            users["short"], items["audience"] = short
            users["short_unit"] = unit_vectors(short[0], "user_id")
    if mined.choice_users is not None and mined.choice_items is not None:
        users["choice"], items["choice"] = logit_vectors(mined.choice_users, mined.choice_items)
        choice_short = choice_short_interest(mined)
        if choice_short is not None:
            users["choice_short"], items["choice_unit"] = choice_short
    return users, items


def products(user_rows, item_rows, users: dict, items: dict) -> dict[str, np.ndarray]:
    """{feature: (n,) float64} of :data:`PRODUCTS` for pairs given by table rows (-1: absent)."""
    out = {}
    for name, (side_u, side_i) in PRODUCTS.items():
        value = np.zeros(len(user_rows))
        if side_u in users and side_i in items:
            ok = (user_rows >= 0) & (item_rows >= 0)
            u = users[side_u][user_rows[ok]].astype(np.float64)
            v = items[side_i][item_rows[ok]].astype(np.float64)
            value[ok] = np.nan_to_num(np.einsum("nd,nd->n", u, v), nan=0.0)
        out[name] = value
    return out


def with_factor_scores(candidates, mined: Mined):
    """``candidates`` (any columns with user_id, item_id) plus the six features of
    :data:`PRODUCTS` as doubles (0 where a vector is missing)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StructField, StructType

    user_frames, item_frames = vector_frames(mined)
    if not user_frames:
        return candidates.select("*", *[F.lit(0.0).alias(n) for n in PRODUCTS])
    user_ids, users = vectors.table(user_frames, "user_id")
    item_ids, items = vectors.table(item_frames, "item_id")
    spark = candidates.sparkSession
    shared = spark.sparkContext.broadcast((user_ids, users, item_ids, items))
    log.info("factor scores from %d user and %d item vector rows (%s)", len(user_ids),
             len(item_ids), ", ".join(sorted(set(users) | set(items))))

    def score(batches):
        user_ids, users, item_ids, items = shared.value
        for batch in batches:
            found = products(vectors.lookup(user_ids, batch["user_id"].to_numpy(np.int64)),
                             vectors.lookup(item_ids, batch["item_id"].to_numpy(np.int64)),
                             users, items)
            yield batch.assign(**found)

    schema = StructType([*candidates.schema.fields,
                         *[StructField(name, DoubleType()) for name in PRODUCTS]])
    return candidates.mapInPandas(score, schema)
