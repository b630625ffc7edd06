"""coverage_metrics on small frames, against counts done by hand in Python."""

import pytest

from solaris_lib.evaluation.speculation import coverage_curve, coverage_metrics

pytestmark = pytest.mark.integration

PAIRS = [(1, 10, ["repeat"]), (1, 11, ["faiss", "popular"]), (2, 10, ["popular"]), (2, 99, ["repeat"])]
FUTURE = [(1, 10), (1, 10), (1, 12), (2, 10), (3, 10), (3, 11), (1, 11)]
KNOWN = [1, 2]


def _frames(spark):
    pairs = spark.createDataFrame(PAIRS, "user_id long, item_id long, sources array<string>")
    logs = spark.createDataFrame(FUTURE, "user_id long, item_id long")
    known = spark.createDataFrame([(u,) for u in KNOWN], "user_id long")
    return pairs, logs, known


def _expected():
    cached = {(u, i) for u, i, _ in PAIRS}
    known_rows = [r for r in FUTURE if r[0] in KNOWN]
    distinct_known = set(known_rows)
    return {
        "coverage": sum(r in cached for r in known_rows) / len(known_rows),
        "coverage_all": sum(r in cached for r in FUTURE) / len(FUTURE),
        "unique_coverage": len(distinct_known & cached) / len(distinct_known),
        "unique_coverage_all": len(set(FUTURE) & cached) / len(set(FUTURE)),
        "waste": len(cached - set(FUTURE)) / len(cached),
        "pairs_precomputed": len(cached),
        "mean_future_pairs_per_user": len(distinct_known) / len({u for u, _ in known_rows}),
        "coverage_new": 0.0,
    }


def test_metrics_match_python(spark):
    got = coverage_metrics(*_frames(spark))
    for name, value in _expected().items():
        assert got[name] == pytest.approx(value), name
    assert got["per_source"]["repeat"] == {"pairs": 2, "coverage": pytest.approx(2 / 5),
                                           "precision": 0.5}
    assert got["per_source"]["popular"]["coverage"] == pytest.approx(2 / 5)


def test_everyone_known_when_no_known_users_given(spark):
    pairs, logs, _ = _frames(spark)
    got = coverage_metrics(pairs, logs)
    assert got["coverage"] == got["coverage_all"] == pytest.approx(_expected()["coverage_all"])


def test_empty_inputs_give_none_ratios(spark):
    pairs, logs, known = _frames(spark)
    got = coverage_metrics(pairs.limit(0), logs.limit(0), known)
    assert got["coverage"] is None and got["waste"] is None and got["pairs_precomputed"] == 0


def test_curve_truncates_by_rank(spark):
    ranked = spark.createDataFrame([(1, 10, 1), (1, 11, 2), (2, 10, 1)],
                                   "user_id long, item_id long, rank int")
    _, logs, known = _frames(spark)
    curve = coverage_curve(ranked, logs, known, [1, 2])
    assert [p["coverage"] for p in curve] == pytest.approx([3 / 5, 4 / 5])
