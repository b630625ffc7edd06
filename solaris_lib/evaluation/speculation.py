"""Coverage and waste of a set of precomputed pairs against the logs that followed (Spark).

Definitions (docs/design.md, "Metrics"), for precomputed pairs P and the log rows R of the following
window, "known" users being those seen in the history before it:

=========================== =======================================================================
coverage                    share of R's rows of known users whose (user, item) is in P
                            (request-weighted: a pair scored 3 times counts 3 times)
coverage_all                the same over all of R's rows (new users included)
coverage_new                the same over rows of users not known
unique_coverage(_all)       share of R's distinct pairs (of known / all users) that are in P
waste                       share of P that no row of R asked for (1 - precision)
pairs_precomputed           |P|
mean_future_pairs_per_user  distinct pairs of R per known user active in R
per_source                  per candidate source: pairs tagged with it, the share of known rows
                            they cover, and their precision
=========================== =======================================================================

``log_shape`` describes the log itself (what kind of log speculation faces), from a history
window and the window that followed it:

=========================== =======================================================================
repeat_share                share of the known users' future rows on pairs of the history
new_pair_share              share of the known users' distinct future pairs not in the history
new_item_share              share of the known users' future rows on items the history lacks
known_row_share             share of the future rows made by known users
rows_per_pair               history rows per distinct (user, item) pair (1: no repeats)
items_per_user              median distinct items per user in the history (user sparsity)
density                     history pairs / (users x items)
item_lifetime_days          median days between an item's first and last history row
=========================== =======================================================================

``coverage_metrics`` is the one implementation; the per-interval DAG evaluation (published pairs
of interval t against the logs of t+1) and ``solaris speculation-eval`` both call it.
"""

from __future__ import annotations

import logging

from solaris_lib.sparkutil import read_parquet

log = logging.getLogger(__name__)


def _as_frame(spark, pairs):
    """A Spark DataFrame from a DataFrame or a parquet path."""
    if isinstance(pairs, str):
        return read_parquet(spark, pairs)
    return pairs


def _future_pairs(logs, known_users):
    """(user_id, item_id, rows, known) of the future log rows."""
    from pyspark.sql import functions as F

    future = logs.groupBy("user_id", "item_id").agg(F.count(F.lit(1)).alias("rows"))
    if known_users is None:
        return future.withColumn("known", F.lit(True))
    known = known_users.select("user_id").distinct().withColumn("known", F.lit(True))
    return future.join(known, "user_id", "left").fillna(False, subset=["known"])


def ratio(numerator, denominator) -> float | None:
    """numerator / denominator, None over an empty denominator (the one rule for every metric)."""
    return None if not denominator else float(numerator) / float(denominator)


def coverage_metrics(pairs, logs, known_users=None, *, spark=None) -> dict:
    """Coverage, waste and per-source contribution of ``pairs`` against ``logs`` (see module doc).

    ``pairs``: DataFrame (or parquet path, then ``spark`` is needed) with user_id, item_id and
    optionally sources list<string>; ``logs``: DataFrame of the following window's rows;
    ``known_users``: DataFrame with user_id, or None to count every user as known.
    Ratios over an empty denominator are None.
    """
    from pyspark.sql import functions as F

    pairs = _as_frame(spark, pairs)
    has_sources = "sources" in pairs.columns
    cols = ["user_id", "item_id"] + (["sources"] if has_sources else [])
    precomputed = pairs.select(*cols).dropDuplicates(["user_id", "item_id"]).withColumn(
        "cached", F.lit(True)).cache()
    future = _future_pairs(logs, known_users).cache()
    joined = future.join(precomputed, ["user_id", "item_id"], "left").fillna(False, subset=["cached"])
    hit, known = F.col("cached"), F.col("known")
    row = joined.agg(
        F.sum("rows").alias("rows_all"),
        F.sum(F.when(hit, F.col("rows")).otherwise(0)).alias("hit_rows_all"),
        F.sum(F.when(known, F.col("rows")).otherwise(0)).alias("rows_known"),
        F.sum(F.when(known & hit, F.col("rows")).otherwise(0)).alias("hit_rows_known"),
        F.count(F.lit(1)).alias("pairs_all"),
        F.sum(hit.cast("long")).alias("hit_pairs_all"),
        F.sum(known.cast("long")).alias("pairs_known"),
        F.sum((known & hit).cast("long")).alias("hit_pairs_known"),
        F.countDistinct(F.when(known, F.col("user_id"))).alias("known_users_active"),
    ).first().asDict()
    row = {k: (v or 0) for k, v in row.items()}
    n_pairs = precomputed.count()
    result = {
        "coverage": ratio(row["hit_rows_known"], row["rows_known"]),
        "coverage_all": ratio(row["hit_rows_all"], row["rows_all"]),
        "coverage_new": ratio(row["hit_rows_all"] - row["hit_rows_known"],
                               row["rows_all"] - row["rows_known"]),
        "unique_coverage": ratio(row["hit_pairs_known"], row["pairs_known"]),
        "unique_coverage_all": ratio(row["hit_pairs_all"], row["pairs_all"]),
        "waste": ratio(n_pairs - row["hit_pairs_all"], n_pairs),
        "pairs_precomputed": n_pairs,
        "future_rows": row["rows_all"],
        "future_rows_known": row["rows_known"],
        "known_users_active": row["known_users_active"],
        "mean_future_pairs_per_user": ratio(row["pairs_known"], row["known_users_active"]),
    }
    if has_sources:
        result["per_source"] = _per_source(precomputed, joined, row["rows_known"])
    future.unpersist()
    precomputed.unpersist()
    return result


def _per_source(precomputed, joined, rows_known) -> dict:
    """Per source: pairs tagged, share of known future rows they cover, precision."""
    from pyspark.sql import functions as F

    tagged = precomputed.select(F.explode("sources").alias("source")).groupBy("source").count()
    pairs = {r["source"]: r["count"] for r in tagged.collect()}
    hits = (
        joined.filter(F.col("cached"))
        .select("rows", "known", F.explode("sources").alias("source"))
        .groupBy("source")
        .agg(F.sum(F.when(F.col("known"), F.col("rows")).otherwise(0)).alias("rows_known"),
             F.count(F.lit(1)).alias("hit_pairs"))
    )
    found = {r["source"]: r for r in hits.collect()}
    out = {}
    for source in sorted(pairs):
        hit = found.get(source)
        out[source] = {
            "pairs": pairs[source],
            "coverage": ratio(hit["rows_known"] if hit else 0, rows_known),
            "precision": ratio(hit["hit_pairs"] if hit else 0, pairs[source]),
        }
    return out


def coverage_curve(ranked, logs, known_users, budgets: list[int]) -> list[dict]:
    """Request-weighted coverage of known users when each keeps its ``b`` best-ranked pairs.

    ``ranked``: (user_id, item_id, rank) with rank 1 = best. One join, one aggregation.
    """
    from pyspark.sql import functions as F

    future = _future_pairs(logs, known_users).filter(F.col("known"))
    joined = future.join(ranked.select("user_id", "item_id", "rank"), ["user_id", "item_id"], "left")
    sums = [F.sum(F.when(F.col("rank") <= b, F.col("rows")).otherwise(0)).alias(f"b{b}")
            for b in budgets]
    row = joined.agg(F.sum("rows").alias("total"), *sums).first().asDict()
    total = row["total"] or 0
    return [{"budget": b, "coverage": ratio(row[f"b{b}"] or 0, total)} for b in budgets]


def plot_coverage_curves(curves: dict[str, list[dict]], path: str, title: str) -> str:
    """PNG of coverage (known users, request-weighted) against the per-user budget."""
    from matplotlib.figure import Figure  # the object API: the caller's backend is untouched

    fig = Figure(figsize=(6.4, 4.2), dpi=110)
    ax = fig.subplots()
    for name, points in curves.items():
        xs = [p["budget"] for p in points if p["coverage"] is not None]
        ys = [p["coverage"] for p in points if p["coverage"] is not None]
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel("pairs per user (budget)")
    ax.set_ylabel("coverage (known users, request-weighted)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    return path


def log_shape(history, future, known_users) -> dict:
    """The shape figures of the module doc (``known_users``: DataFrame with user_id)."""
    from pyspark.sql import functions as F

    pairs = history.groupBy("user_id", "item_id").agg(F.count(F.lit(1)).alias("n")).cache()
    hist = pairs.agg(F.count(F.lit(1)).alias("pairs"), F.sum("n").alias("rows"),
                     F.countDistinct("user_id").alias("users"),
                     F.countDistinct("item_id").alias("items")).first()
    per_user = pairs.groupBy("user_id").count().agg(
        F.percentile_approx("count", 0.5).alias("median")).first()["median"]
    span = (F.max(F.col("ts").cast("double")) - F.min(F.col("ts").cast("double"))) / 86400.0
    lifetime = history.groupBy("item_id").agg(span.alias("days")).agg(
        F.percentile_approx("days", 0.5).alias("median")).first()["median"]
    ahead = _future_pairs(future, known_users)
    items = pairs.select("item_id").distinct().withColumn("old_item", F.lit(True))
    seen = pairs.select("user_id", "item_id", F.lit(True).alias("old_pair"))
    joined = (ahead.join(seen, ["user_id", "item_id"], "left")
              .join(items, "item_id", "left").fillna(False, subset=["old_pair", "old_item"]))
    known, old_pair, old_item = F.col("known"), F.col("old_pair"), F.col("old_item")
    row = joined.agg(
        F.sum("rows").alias("rows"),
        F.sum(F.when(known, F.col("rows")).otherwise(0)).alias("known_rows"),
        F.sum(F.when(known & old_pair, F.col("rows")).otherwise(0)).alias("repeat_rows"),
        F.sum(F.when(known & ~old_item, F.col("rows")).otherwise(0)).alias("new_item_rows"),
        F.sum(known.cast("long")).alias("known_pairs"),
        F.sum((known & ~old_pair).cast("long")).alias("new_pairs"),
    ).first().asDict()
    pairs.unpersist()
    row = {k: v or 0 for k, v in row.items()}
    return {
        "repeat_share": ratio(row["repeat_rows"], row["known_rows"]),
        "new_pair_share": ratio(row["new_pairs"], row["known_pairs"]),
        "new_item_share": ratio(row["new_item_rows"], row["known_rows"]),
        "known_row_share": ratio(row["known_rows"], row["rows"]),
        "rows_per_pair": ratio(hist["rows"] or 0, hist["pairs"]),
        "items_per_user": per_user,
        "density": ratio(hist["pairs"], (hist["users"] or 0) * (hist["items"] or 0)),
        "item_lifetime_days": lifetime,
    }
