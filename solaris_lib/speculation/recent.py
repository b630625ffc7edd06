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

import numpy as np

from solaris_lib.speculation import vectors
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


def weighted_means(pairs, key: str, other: str, means: dict[str, tuple[str, str]],
                   tables: dict):
    """(key long, *means array<float>): per ``key``, each mean's ``(weight column, table
    name)``: the mean of the ``tables[name]`` vectors (an (``other``, factor) frame) of the
    key's pairs, weighted by that column of ``pairs``; null where none of its pairs has such a
    vector (zero weights give the zero vector). ``key`` and ``other`` are integer ids.

    One pass over ``pairs`` for every mean: the vector tables are collected and broadcast
    (:mod:`vectors`), the pairs repartitioned by ``key`` and sorted by (key, other) so that
    every rerun adds in the same order, and each Arrow batch reduced in numpy (a key cut by a
    batch boundary is carried into the next batch)."""
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    columns = sorted({column for column, _ in means.values()})
    ids, matrices = vectors.table(tables, other)
    shared = pairs.sparkSession.sparkContext.broadcast((ids, matrices))

    def run(batches):
        """Yield the means of every key whose rows all arrived; a key still open at a batch's
        end waits in ``pending`` (appended to while batches hold it alone, joined once)."""
        import pandas as pd

        ids, matrices = shared.value
        pending = []
        for batch in batches:
            keys = batch[key].to_numpy(np.int64)
            if not len(keys):
                continue
            if pending and keys[0] == keys[-1] == pending[0][key].iloc[0]:
                pending.append(batch)
                continue
            frame = pd.concat([*pending, batch], ignore_index=True) if pending else batch
            cut = int(np.searchsorted(frame[key].to_numpy(np.int64), keys[-1]))
            if cut:
                yield _reduce(frame.iloc[:cut], key, other, means, ids, matrices)
            pending = [frame.iloc[cut:]]
        if pending:
            yield _reduce(pd.concat(pending, ignore_index=True), key, other, means, ids,
                          matrices)

    schema = StructType([StructField(key, LongType()),
                         *[StructField(name, ArrayType(FloatType())) for name in means]])
    return (pairs.select(key, other, *columns).repartition(key)
            .sortWithinPartitions(key, other).mapInPandas(run, schema))


def _reduce(frame, key: str, other: str, means: dict, ids, matrices):
    """pandas (key, *means) with one row per key of ``frame`` (n rows sorted by key, then
    other; every row of each of its keys), each mean a float32 (d,) array or None; ``ids``
    (m,) sorted, ``matrices`` {table name: (m, d) float32, NaN rows where absent}."""
    import pandas as pd

    keys = frame[key].to_numpy(np.int64)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    out = {key: keys[starts]}
    for name, (column, table_name) in means.items():
        matrix = matrices[table_name]
        rows = vectors.present(ids, matrix, frame[other].to_numpy(np.int64))
        found = rows >= 0
        weights = np.where(found, frame[column].to_numpy(np.float64), 0.0)
        found_vectors = np.zeros((len(rows), matrix.shape[1]))
        found_vectors[found] = matrix[rows[found]]
        sums = np.add.reduceat(found_vectors * weights[:, None], starts, axis=0)
        totals = np.maximum(np.add.reduceat(weights, starts), 1e-12)
        counts = np.add.reduceat(found.astype(np.int64), starts)
        mean = (sums / totals[:, None]).astype(np.float32)
        out[name] = [row if count else None for row, count in zip(mean, counts, strict=True)]
    return pd.DataFrame(out)


def _queries(mined: Mined):
    """(cached (user_id, recent, short, choice_short) frame, {"als", "choice": unit item
    vectors}): the queries of known users (null where a user has none of a kind; a kind is
    absent without its vectors or, for the short ones, without ``recent_decayed``), computed
    together on first use; None when no kind can be computed."""
    if mined.queries is None:
        tables, means = {}, {}
        short = SHORT_COLUMN in mined.pair_stats.columns
        if mined.item_factors is not None:
            tables["als"] = unit_item_factors(mined.item_factors).cache()
            means["recent"] = ("decayed", "als")
            if short:
                means["short"] = (SHORT_COLUMN, "als")
        if mined.choice_items is not None and short:
            tables["choice"] = unit_vectors(mined.choice_items, "item_id").cache()
            means["choice_short"] = (SHORT_COLUMN, "choice")
        if not means:
            return None
        queries = weighted_means(mined.pair_stats, "user_id", "item_id", means, tables)
        mined.queries = (queries.join(mined.user_stats.select("user_id"), "user_id").cache(),
                         tables)
    return mined.queries


def _query(mined: Mined, name: str):
    """(user_id, factor) of one kind of :func:`_queries` (users without one left out)."""
    from pyspark.sql import functions as F

    queries, _ = _queries(mined)
    return queries.where(F.col(name).isNotNull()).select("user_id", F.col(name).alias("factor"))


def recent_queries(mined: Mined):
    """(user_id, factor array<float>) recent-interest queries of known users; None without factors.

    A view of the queries cached on ``mined`` (:func:`_queries`; both the item_faiss source and
    the ``recent_sim`` feature use it).
    """
    return None if mined.item_factors is None else _query(mined, "recent")


def unit_items(mined: Mined):
    """The unit item factors that :func:`recent_queries` used (None without factors)."""
    return None if mined.item_factors is None else _queries(mined)[1]["als"]


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
        queries = _query(mined, "short")
        audiences = weighted_means(mined.pair_stats, "item_id", "user_id",
                                   {"audience": (SHORT_COLUMN, "short")},
                                   {"short": unit_vectors(queries, "user_id")})
        audiences = audiences.where("audience IS NOT NULL").select(
            "item_id", audiences["audience"].alias("factor"))
        mined.short = (queries, unit_vectors(audiences, "item_id").cache())
    return mined.short


def choice_short_interest(mined: Mined):
    """(unit short queries, unit choice item vectors): (user_id, factor) and (item_id, factor)
    in the choice model's space; None without choice vectors or ``recent_decayed``. Views of the
    queries and vectors cached on ``mined`` (:func:`_queries`)."""
    if mined.choice_items is None or SHORT_COLUMN not in mined.pair_stats.columns:
        return None
    return (unit_vectors(_query(mined, "choice_short"), "user_id"),
            _queries(mined)[1]["choice"])
