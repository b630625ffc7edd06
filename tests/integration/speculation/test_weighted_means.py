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


def _means(spark, pairs, first, second, batch_rows: int) -> pd.DataFrame:
    def frame(table):
        return spark.createDataFrame(pd.DataFrame({"item_id": list(table),
                                                   "factor": [v.tolist() for v in table.values()]}),
                                     "item_id long, factor array<float>")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
    try:
        return weighted_means(spark.createDataFrame(pairs), "user_id", "item_id",
                              {"x": ("a", "first"), "y": ("b", "second")},
                              {"first": frame(first), "second": frame(second)}).toPandas()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_means_match_numpy_and_every_batch_size_adds_alike(spark):
    rng = np.random.default_rng(5)
    pairs = pd.DataFrame({"user_id": rng.integers(0, 40, 600), "item_id": rng.integers(0, 90, 600)})
    pairs = pairs.drop_duplicates().reset_index(drop=True)
    pairs["a"] = rng.exponential(size=len(pairs)) * (rng.random(len(pairs)) > 0.1)  # some zeros
    pairs["b"] = rng.exponential(size=len(pairs))
    edge = pd.DataFrame({"user_id": [99, 99, 98, 98], "item_id": [500, 501, 2, 4],
                         "a": [1.0, 2.0, 0.0, 0.0], "b": [1.0, 1.0, 0.0, 0.0]})
    pairs = pd.concat([pairs, edge], ignore_index=True)  # 99: no vectors; 98: zero weights
    first = {i: rng.normal(size=4).astype(np.float32) for i in range(90) if i % 5}
    second = {i: rng.normal(size=3).astype(np.float32) for i in range(0, 90, 2)}

    small, large = (_means(spark, pairs, first, second, rows).set_index("user_id").sort_index()
                    for rows in (7, 10_000))
    assert list(small.index) == list(large.index) == sorted(pairs.user_id.unique())  # once each
    for name, column, table in (("x", "a", first), ("y", "b", second)):
        expected = _expected(pairs, table, column)
        assert small.loc[99, name] is None and expected[99] is None
        assert np.array_equal(np.asarray(small.loc[98, name]), np.zeros(len(table[2])))
        for key, mean in expected.items():
            if mean is None:
                assert small.loc[key, name] is None and large.loc[key, name] is None
                continue
            assert np.asarray(small.loc[key, name]).tobytes() == np.asarray(
                large.loc[key, name]).tobytes()  # the same sums in the same order
            np.testing.assert_allclose(np.asarray(small.loc[key, name]), mean, rtol=1e-6,
                                       atol=1e-6)
