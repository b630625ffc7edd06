"""recent.weighted_means (every user query and item audience) against numpy, whatever the
Arrow batch size: a key whose rows straddle two batches is reduced once, with all its rows."""

import numpy as np
import pandas as pd
import pytest

from solaris_lib.speculation.recent import weighted_means

pytestmark = [pytest.mark.integration]


def _expected(pairs: pd.DataFrame, vectors: dict[int, np.ndarray], column: str) -> dict:
    """{key: mean vector or None} computed row by row."""
    out = {}
    for key, group in pairs.groupby("user_id"):
        rows = [(w, vectors[i]) for i, w in zip(group.item_id, group[column], strict=True)
                if i in vectors]
        if not rows:
            out[key] = None
            continue
        total = sum(w for w, _ in rows)
        out[key] = sum(w * v.astype(np.float64) for w, v in rows) / max(total, 1e-12)
    return out


@pytest.mark.parametrize("batch_rows", [7, 10_000])
def test_means_match_numpy_across_batch_boundaries(spark, batch_rows):
    rng = np.random.default_rng(5)
    pairs = pd.DataFrame({"user_id": rng.integers(0, 40, 600), "item_id": rng.integers(0, 90, 600)})
    pairs = pairs.drop_duplicates().reset_index(drop=True)
    pairs["a"] = rng.exponential(size=len(pairs)) * (rng.random(len(pairs)) > 0.1)  # some zeros
    pairs["b"] = rng.exponential(size=len(pairs))
    lonely = pd.DataFrame({"user_id": [99, 99], "item_id": [500, 501], "a": [1.0, 2.0],
                           "b": [1.0, 1.0]})  # items without vectors: no mean
    pairs = pd.concat([pairs, lonely], ignore_index=True)
    first = {i: rng.normal(size=4).astype(np.float32) for i in range(90) if i % 5}
    second = {i: rng.normal(size=3).astype(np.float32) for i in range(0, 90, 2)}

    def frame(table):
        return spark.createDataFrame(pd.DataFrame({"item_id": list(table),
                                                   "factor": [v.tolist() for v in table.values()]}),
                                     "item_id long, factor array<float>")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
    try:
        got = weighted_means(spark.createDataFrame(pairs), "user_id", "item_id",
                             {"x": ("a", "first"), "y": ("b", "second")},
                             {"first": frame(first), "second": frame(second)}).toPandas()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert sorted(got.user_id) == sorted(pairs.user_id.unique())  # one row per key
    got = got.set_index("user_id")
    for name, column, table in (("x", "a", first), ("y", "b", second)):
        expected = _expected(pairs, table, column)
        assert got.loc[99, name] is None and expected[99] is None
        for key, mean in expected.items():
            if mean is None:
                assert got.loc[key, name] is None
            else:
                np.testing.assert_allclose(np.asarray(got.loc[key, name]), mean, rtol=1e-6,
                                           atol=1e-6)
