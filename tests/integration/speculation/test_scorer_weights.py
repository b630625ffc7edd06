"""The learned scorer weighs each positive by its rows in the label window (coverage counts rows)."""

from __future__ import annotations

import pytest

from solaris_lib.speculation import scorer

pytestmark = pytest.mark.integration


def _candidates(spark):
    """400 candidates of one user: ``pair_n`` 1 for half of them, 0 for the rest, other features 0.

    Both halves have the same positive rate (1 in 4), but a positive of the ``pair_n`` = 1 half
    is scored 12 times in the label window and one of the other half once."""
    rows = []
    for item in range(400):
        values = dict.fromkeys(scorer.FEATURES, 0.0)
        values["pair_n"] = float(item % 2)
        rows.append((1, item, *values.values()))
    columns = ["user_id", "item_id", *scorer.FEATURES]
    return spark.createDataFrame(rows, columns)


def _future(spark):
    """Log rows of the label window: items with item % 8 in {0, 1}, 12 rows when odd, else 1."""
    rows = []
    for item in range(400):
        if item % 8 in (0, 1):  # one in four of each half
            rows.extend([(1, item)] * (12 if item % 2 else 1))
    return spark.createDataFrame(rows, "user_id long, item_id long")


def test_label_counts_rows_and_flags_positives(spark):
    labelled = scorer.label(_candidates(spark), _future(spark))
    got = {r["item_id"]: (r["rows"], r["label"]) for r in labelled.collect()}
    assert got[0] == (1.0, 1.0)
    assert got[1] == (12.0, 1.0)
    assert got[2] == (0.0, 0.0)
    assert sum(label for _, label in got.values()) == 100


def test_positives_weigh_their_rows(spark):
    """Unweighted, both halves would score alike (same positive rate); weighted, the half whose
    positives bring 12 rows each ranks first."""
    model = scorer.train(scorer.label(_candidates(spark), _future(spark)), seed=7)
    scored = {r["item_id"]: r["score"] for r in scorer.score(_candidates(spark), model).collect()}
    assert scored[1] > scored[0] + 0.3


def test_spark_scores_are_the_models_probabilities(spark):
    """The fitted model scores in Spark (a column expression) as numpy does on the same rows."""
    import numpy as np

    model = scorer.train(scorer.label(_candidates(spark), _future(spark)), seed=7)
    rows = scorer.score(_candidates(spark), model).toPandas()
    expected = 1 / (1 + np.exp(-model.logit(rows[list(scorer.FEATURES)].to_numpy(np.float64))))
    np.testing.assert_allclose(rows["score"].to_numpy(), expected, rtol=1e-12)


def test_choice_rank_is_the_log_rank_within_the_user_ties_sharing_their_mean(spark):
    """Ranks by hand: user 1's values 0.9, 0.5, 0.5, 0.1 rank 1, 2.5, 2.5, 4; user 2's three
    values, all 0 (no choice query), rank 2 each, the middle of its list."""
    import math

    rows = [(1, 10, 0.5), (1, 11, 0.9), (1, 12, 0.1), (1, 13, 0.5), (2, 10, 0.0), (2, 11, 0.0),
            (2, 12, 0.0)]
    frame = spark.createDataFrame(rows, "user_id long, item_id long, choice_sim_short double")
    got = {(r.user_id, r.item_id): r.choice_rank for r in frame.select(
        "user_id", "item_id", scorer.rank_within_user("choice_sim_short").alias("choice_rank"))
        .collect()}
    assert got == pytest.approx({(1, 10): math.log(2.5), (1, 11): 0.0, (1, 12): math.log(4),
                                 (1, 13): math.log(2.5), (2, 10): math.log(2),
                                 (2, 11): math.log(2), (2, 12): math.log(2)}, abs=1e-12)
