"""The popular source: the most popular live items new to each user, by a chosen measure.

A measure is a column of ``item_stats`` (:data:`MEASURES`): ``lookback`` (rows of the whole
window: the textbook counts), ``short`` (rows of the last ``MineConfig.short_window``, 7 days) or
``decayed`` (rows weighted with the 3-day half-life). Which counts predict the next interval
depends on the log: films rated for months want long windows, campaigns that turn over in days
may want the decayed counts. The source ranks by the first of ``SpeculateConfig.popular_by``
unless another covered the labelled previous interval clearly better (:func:`choose_measure`).

With the repeat source on, each user gets the ``n`` most popular live items *new to them*
(the repeat source proposes the others): the textbook popularity list. Each user walks the
ranking as far as they need, so a heavy user who was scored on much of the head still gets
``n`` new items (the list shipped to the executors holds ``n`` plus the longest seen list).
"""

from __future__ import annotations

import logging

import numpy as np

from solaris_lib.speculation.config import SpeculateConfig
from solaris_lib.speculation.mined import Mined

log = logging.getLogger(__name__)

MEASURES = {"decayed": "decayed", "short": "short_rows", "lookback": "popularity"}


def available_measures(mined: Mined, config: SpeculateConfig) -> tuple[str, ...]:
    """``config.popular_by`` without the measures whose column ``mined.item_stats`` lacks
    (mined by an older version; logged)."""
    columns = set(mined.item_stats.columns)
    usable = tuple(m for m in config.popular_by if MEASURES[m] in columns)
    for missing in sorted(set(config.popular_by) - set(usable)):
        log.warning("item_stats has no %s column (mined by an older version): popularity "
                    "measure %r skipped; rerun mine_logs for this interval", MEASURES[missing],
                    missing)
    return usable or ("lookback",)


def popular_candidates(mined: Mined, live, n: int, seen=None, measure: str = "lookback"):
    """(user_id, item_id, source "popular", v = the item's measure) for every known user.

    Without ``seen`` every user gets the same ``n`` most popular live items (ties: smaller
    id). With ``seen`` (``(user_id, seen array<long>)``, :func:`candidates.seen_lists`), each
    user gets the ``n`` most popular items not in their list: at most users x ``n`` rows.
    """
    from pyspark.sql import functions as F

    ranked = _ranked(live, measure)
    users = mined.user_stats.select("user_id")
    if seen is None:
        pairs = users.crossJoin(F.broadcast(ranked.limit(n)))
    else:
        top = _top(live, measure, n + longest_seen(seen))
        listed = users.join(seen, "user_id", "left").mapInPandas(
            _new_items_of(top, n), "user_id long, item_id long")
        pairs = listed.join(F.broadcast(ranked), "item_id")
    return pairs.select("user_id", "item_id", F.lit("popular").alias("source"), "v")


def _ranked(live, measure: str):
    """(item_id, v = the measure as a double) of the live items, most popular first (ties:
    smaller id)."""
    from pyspark.sql import functions as F

    return live.select("item_id", F.col(MEASURES[measure]).cast("double").alias("v")).orderBy(
        F.col("v").desc(), "item_id")


def _top(live, measure: str, count: int) -> list[int]:
    """The ``count`` most popular live item ids by ``measure``, in rank order."""
    return _ranked(live, measure).limit(count).toPandas()["item_id"].tolist()


def longest_seen(seen) -> int:
    """The longest ``seen`` list (0 when there is none)."""
    from pyspark.sql import functions as F

    return seen.agg(F.max(F.size("seen"))).first()[0] or 0


def _new_in(ranked: list[int], seen, n: int) -> list[int]:
    """The first ``n`` of ``ranked`` not in ``seen`` (an array, or None: nothing seen)."""
    from itertools import islice

    skip = set() if seen is None else set(seen.tolist())
    return list(islice((i for i in ranked if i not in skip), n))


def _new_items_of(ranked: list[int], n: int):
    """mapInPandas function: (user_id, seen) batches -> (user_id, item_id), each user's first
    ``n`` of ``ranked`` that are not in ``seen`` (null: none seen)."""

    def new_items(batches):
        import pandas as pd

        for batch in batches:
            users, items = [], []
            for user, seen in zip(batch["user_id"], batch["seen"], strict=True):
                picked = _new_in(ranked, seen, n)
                users += [user] * len(picked)
                items += picked
            yield pd.DataFrame({"user_id": pd.array(users, "int64"),
                                "item_id": pd.array(items, "int64")})

    return new_items


def choose_measure(past: Mined, labels, live, seen, config: SpeculateConfig) -> tuple[str, dict]:
    """(measure, {measure: coverage}): the measure whose lists (``config.popular_count()``
    items per user) covered ``labels`` (the log rows that followed ``past.asof``, of the known
    users of ``past``) clearly better than the first of ``config.popular_by``; else the first.

    "Clearly": of the rows one list covers and the other does not, the other's exceed the
    first's by more than twice their noise, ``2 sqrt(b + c)`` (a paired comparison; a sparse
    log's week holds a few hundred rows, and a plain maximum would follow their noise)."""
    from pyspark.sql import functions as F

    measures = available_measures(past, config)
    if len(measures) == 1:
        return measures[0], {}
    n = config.popular_count()
    depth = n + (0 if seen is None else longest_seen(seen))
    tops = {m: _top(live, m, depth) for m in measures}
    rows = (labels.join(past.user_stats.select("user_id"), "user_id")
            .groupBy("user_id", "item_id").agg(F.count(F.lit(1)).alias("rows"))
            .groupBy("user_id").agg(F.collect_list(F.struct("item_id", "rows")).alias("labels")))
    users = rows.join(seen, "user_id", "left") if seen is not None else rows.withColumn(
        "seen", F.lit(None).cast("array<long>"))
    schema = _hits_schema(measures)
    sums = users.mapInPandas(_measure_hits(tops, n, measures), schema).agg(
        *[F.sum(c).alias(c) for c in schema.fieldNames()]).first()
    rows_of = {name: sums[name] or 0 for name in schema.fieldNames()}
    total = rows_of["total"]
    covered = {m: rows_of[m] / total if total else 0.0 for m in measures}
    first, margins = measures[0], {}
    for other in measures[1:]:  # rows only the other's lists cover, only the first's
        b = rows_of[other] - rows_of[f"both_{other}"]
        c = rows_of[first] - rows_of[f"both_{other}"]
        margins[other] = (b - c) / max(2.0 * np.sqrt(b + c), 1.0)
    clear = [m for m in measures[1:] if margins[m] > 1.0]
    best = max(clear, key=lambda m: (covered[m], -measures.index(m))) if clear else first
    log.info("popularity measure %s: its lists covered %s of the previous interval's rows "
             "(margins over %s in noise units: %s)", best,
             ", ".join(f"{m} {c:.4f}" for m, c in covered.items()), first,
             ", ".join(f"{m} {v:+.2f}" for m, v in margins.items()))
    return best, covered


def _hits_schema(measures: tuple[str, ...]):
    """Per user: ``total`` labelled rows, the rows each measure's list covers (named by the
    measure) and, for each measure after the first, the rows both its list and the first's
    cover (``both_<measure>``)."""
    from pyspark.sql.types import LongType, StructField, StructType

    names = ["total", *measures, *[f"both_{m}" for m in measures[1:]]]
    return StructType([StructField(name, LongType()) for name in names])


def _measure_hits(tops: dict[str, list[int]], n: int, measures: tuple[str, ...]):
    """mapInPandas function: (user_id, labels [(item_id, rows)], seen) -> one row of
    :func:`_hits_schema` per user: each measure's list is the user's first ``n`` of
    ``tops[m]`` not in ``seen``, as :func:`popular_candidates` makes it."""
    first, columns = measures[0], _hits_schema(measures).fieldNames()

    def hits(batches):
        import pandas as pd

        for batch in batches:
            out = []
            for labels, seen in zip(batch["labels"], batch["seen"], strict=True):
                label = {entry["item_id"]: entry["rows"] for entry in labels}
                lists = {m: set(_new_in(tops[m], seen, n)) for m in measures}
                out.append([sum(label.values()),
                            *[_rows_on(label, lists[m]) for m in measures],
                            *[_rows_on(label, lists[m] & lists[first]) for m in measures[1:]]])
            yield pd.DataFrame(out, columns=columns, dtype="int64")

    return hits


def _rows_on(label: dict[int, int], items: set[int]) -> int:
    """The labelled rows (``label``: item -> rows) on ``items``."""
    return sum(label.get(i, 0) for i in items)
