"""Per-user and global budgets, and the heuristic score, against Python computations."""

import math
import random

import pytest

from solaris_lib.speculation.scorer import apply_budgets

pytestmark = pytest.mark.integration


def _rows(seed=5):
    rng = random.Random(seed)
    return [(u, i, round(rng.random(), 2)) for u in range(6) for i in range(rng.randint(0, 9))]


def _python_budgets(rows, per_user, global_cap):
    kept = []
    for user in sorted({u for u, _, _ in rows}):
        mine = sorted((r for r in rows if r[0] == user), key=lambda r: (-r[2], r[1]))
        kept.extend(mine[:per_user])
    kept.sort(key=lambda r: (-r[2], r[0], r[1]))
    return sorted(kept if global_cap is None else kept[:global_cap])


@pytest.mark.parametrize(("per_user", "global_cap"), [(3, None), (2, 5), (100, 7), (1, 1)])
def test_budgets_match_python(spark, per_user, global_cap):
    rows = _rows()
    frame = spark.createDataFrame(rows, "user_id long, item_id long, score double")
    got = sorted((r.user_id, r.item_id, r.score)
                 for r in apply_budgets(frame, per_user, global_cap).collect())
    assert got == _python_budgets(rows, per_user, global_cap)


def test_heuristic_matches_formula(spark):
    from solaris_lib.speculation.scorer import heuristic_score

    cols = "p_rep double, p_pop double, als double, faiss double, cooc double, miss double"
    values = [(0.5, 0.2, 0.8, 1.0, 1.5, 0.0), (0.0, 0.0, 2.0, 0.0, 0.0, 1.0)]
    got = [r.h for r in spark.createDataFrame(values, cols)
           .withColumn("h", heuristic_score()).collect()]
    expected = [1 - (1 - a) * (1 - b) * (1 - 0.5 * f * min(max(c, 0), 1)) * (1 - 0.2 * (d > 0))
                * (1 - 0.5 * (e > 0)) for a, b, c, f, d, e in values]
    assert all(math.isclose(g, e) for g, e in zip(got, expected, strict=True))
