"""The item_faiss and faiss sources and the recent_sim, recent_sim_short and audience_sim features
against numpy computations on hand-built logs."""

from datetime import timedelta

import numpy as np
import pytest

from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window_spark
from solaris_lib.speculation.candidates import (
    faiss_candidates,
    faiss_feature,
    gather,
    item_faiss_candidates,
    live_items,
    seen_lists,
)
from solaris_lib.speculation.config import MineConfig, SpeculateConfig
from solaris_lib.speculation.factor_scores import PRODUCTS
from solaris_lib.speculation.mined import Mined
from solaris_lib.speculation.pipeline import mined_in_memory, speculate_frames
from solaris_lib.speculation.recent import (
    choice_short_interest,
    recent_queries,
    short_interest,
)
from solaris_lib.speculation.scorer import add_features

from .builders import T0, decay, row, write_logs

pytestmark = pytest.mark.integration

END = T0 + timedelta(hours=30)
USERS, ITEMS, DIM, K = 5, 12, 4, 3
CONFIG = SpeculateConfig(budget_per_user=2, faiss_k=K, sources=("item_faiss",),
                         live_window=timedelta(days=3))


def _rows():
    rng = np.random.default_rng(11)
    rows = []
    for n in range(60):
        user, item = int(rng.integers(USERS)), 100 + int(rng.integers(ITEMS))
        rows.append(row(f"r{n}", float(rng.uniform(0, 29)), user, item))
    return rows


def _factors():
    rng = np.random.default_rng(12)
    return {100 + i: rng.standard_normal(DIM).astype(np.float32) for i in range(ITEMS)}


@pytest.fixture(scope="module")
def mined(spark, tmp_path_factory):
    rows = _rows()
    root = write_logs(tmp_path_factory.mktemp("item-faiss-logs"), rows)
    logs = read_window_spark(spark, str(root), Interval(T0, END))
    factors = spark.createDataFrame([(i, [float(x) for x in v]) for i, v in _factors().items()],
                                    "item_id long, factor array<float>")
    users = spark.createDataFrame([(u, [1.0] * DIM) for u in range(USERS)],
                                  "user_id long, factor array<float>")
    return mined_in_memory(spark, logs, END, MineConfig(), (users, factors)), rows


def _expected_queries(rows, half_life=None, factors=None):
    half_life = half_life or MineConfig().half_life
    unit = {i: v / np.linalg.norm(v) for i, v in (factors or _factors()).items()}
    sums, weights = {}, {}
    for r in rows:
        w = decay(END, r["ts"], half_life.total_seconds())
        sums[r["user_id"]] = sums.get(r["user_id"], 0.0) + w * unit[r["item_id"]]
        weights[r["user_id"]] = weights.get(r["user_id"], 0.0) + w
    return {u: sums[u] / weights[u] for u in sums}, unit


def test_recent_query_is_the_decayed_mean_of_unit_item_factors(mined):
    mined, rows = mined
    expected, _ = _expected_queries(rows)
    got = {r.user_id: np.array(r.factor) for r in recent_queries(mined).collect()}
    assert set(got) == set(expected)
    assert all(np.allclose(got[u], expected[u], atol=1e-4) for u in expected)


def _expected_short(rows):
    """(short queries {user: (d,)}, audiences {item: (d,)}, unit item factors) in numpy."""
    half_life = MineConfig().recent_half_life
    queries, unit = _expected_queries(rows, half_life)
    sums = {}
    for r in rows:
        w = decay(END, r["ts"], half_life.total_seconds())
        q = queries[r["user_id"]]
        sums[r["item_id"]] = sums.get(r["item_id"], 0.0) + w * q / np.linalg.norm(q)
    return queries, {i: v / np.linalg.norm(v) for i, v in sums.items()}, unit


def test_short_queries_and_audiences_match_numpy(mined):
    mined, rows = mined
    queries, audiences, _ = _expected_short(rows)
    got_queries, got_audiences = (
        {r[0]: np.array(r.factor) for r in frame.collect()} for frame in short_interest(mined))
    assert set(got_queries) == set(queries) and set(got_audiences) == set(audiences)
    assert all(np.allclose(got_queries[u], queries[u], atol=1e-4) for u in queries)
    assert all(np.allclose(got_audiences[i], audiences[i], atol=1e-4) for i in audiences)
    assert not np.allclose(queries[0], _expected_queries(rows)[0][0], atol=1e-3)  # not recent_sim's


def test_an_item_whose_users_have_no_short_query_has_no_audience(mined):
    """User 99 was scored only on item 999, which has no ALS factor: 99 gets no short query,
    so 999's audience is a mean over no vector. It is left out, not a null vector."""
    from pyspark.sql import functions as F

    mined, rows = mined
    extra = (mined.pair_stats.where("user_id = 0").limit(1)
             .withColumn("user_id", F.lit(99).cast("long"))
             .withColumn("item_id", F.lit(999).cast("long")))
    odd = Mined(mined.asof, mined.pair_stats.unionByName(extra), mined.item_stats,
                mined.user_stats, mined.cooccurrence, mined.user_factors, mined.item_factors)
    queries, audiences = short_interest(odd)
    assert 99 not in {r.user_id for r in queries.collect()}
    got = {r.item_id: r.factor for r in audiences.collect()}
    assert set(got) == set(_expected_short(rows)[1])  # 999 not among them
    assert all(factor is not None for factor in got.values())


def test_choice_short_queries_are_the_short_mean_in_choice_space(spark, mined):
    mined, rows = mined
    rng = np.random.default_rng(13)
    choice = {i: rng.standard_normal(3).astype(np.float32) for i in _factors()}
    items = spark.createDataFrame([(i, [float(x) for x in v], 0.5) for i, v in choice.items()],
                                  "item_id long, factor array<float>, bias double")
    users = spark.createDataFrame([(u, [1.0] * 3) for u in range(USERS)],
                                  "user_id long, factor array<float>")
    with_choice = Mined(mined.asof, mined.pair_stats, mined.item_stats, mined.user_stats,
                        mined.cooccurrence, mined.user_factors, mined.item_factors, users, items)
    expected, unit = _expected_queries(rows, MineConfig().recent_half_life, choice)
    queries, units = choice_short_interest(with_choice)
    got = {r.user_id: np.array(r.factor) for r in queries.collect()}
    assert set(got) == set(expected)
    assert all(np.allclose(got[u], q / np.linalg.norm(q), atol=1e-4) for u, q in expected.items())
    got_units = {r.item_id: np.array(r.factor) for r in units.collect()}
    assert all(np.allclose(got_units[i], unit[i], atol=1e-6) for i in unit)
    pairs = spark.createDataFrame(
        [(u, i, [], None, None, None, None) for u in expected for i in choice],
        "user_id long, item_id long, sources array<string>, faiss_score double, "
        "item_faiss_score double, cooc_score double, miss_count double")
    features = add_features(pairs, with_choice).select(
        "user_id", "choice_sim_short", "choice_rank").toPandas()
    ranks = features.groupby("user_id")["choice_sim_short"].rank(ascending=False)  # pandas'
    assert features["choice_sim_short"].nunique() > len(expected)  # not all ties
    np.testing.assert_allclose(features["choice_rank"], np.log(ranks), atol=1e-12)


def test_short_interest_features_of_every_pair(spark, mined):
    mined, rows = mined
    queries, audiences, unit = _expected_short(rows)
    pairs = spark.createDataFrame(
        [(u, i, [], None, None, None, None) for u in queries for i in audiences],
        "user_id long, item_id long, sources array<string>, faiss_score double, "
        "item_faiss_score double, cooc_score double, miss_count double")
    got = {(r.user_id, r.item_id): r for r in add_features(pairs, mined).collect()}
    assert len(got) == len(queries) * len(audiences)
    for (user, item), r in got.items():
        q = queries[user]
        assert abs(r.recent_sim_short - float(q @ unit[item])) < 1e-4
        assert abs(r.audience_sim - float(q @ audiences[item] / np.linalg.norm(q))) < 1e-4


def test_short_interest_features_are_zero_without_the_column(spark, mined):
    mined, _ = mined
    old = Mined(mined.asof, mined.pair_stats.drop("recent_decayed"), mined.item_stats,
                mined.user_stats, mined.cooccurrence, mined.user_factors, mined.item_factors)
    assert short_interest(old) is None
    pairs = mined.pair_stats.select("user_id", "item_id").limit(5).crossJoin(spark.createDataFrame(
        [([], None, None, None, None)], "sources array<string>, faiss_score double, "
        "item_faiss_score double, cooc_score double, miss_count double"))
    rows = add_features(pairs, old).collect()
    assert rows and all(r.recent_sim_short == 0.0 and r.audience_sim == 0.0 for r in rows)
    unused = add_features(pairs, mined, with_als=False).collect()  # a run that uses no factors
    assert unused and all(r[name] == 0.0 for r in unused for name in (*PRODUCTS, "choice_rank"))


def test_item_faiss_returns_each_users_nearest_live_items(spark, mined):
    mined, rows = mined
    expected, unit = _expected_queries(rows)
    live = {r.item_id for r in live_items(mined, CONFIG).collect()}
    found = item_faiss_candidates(spark, mined, live_items(mined, CONFIG), CONFIG).collect()
    assert {r.source for r in found} == {"item_faiss"}
    for user, query in expected.items():
        scores = {i: float(query @ unit[i]) for i in live}
        top = sorted(scores, key=lambda i: -scores[i])[:K]
        got = sorted((r for r in found if r.user_id == user), key=lambda r: -r.v)
        assert [r.item_id for r in got] == top
        assert all(abs(r.v - scores[r.item_id]) < 1e-4 for r in got)


def test_with_the_repeat_source_the_pool_skips_the_users_own_items(spark, mined):
    mined, rows = mined
    config = CONFIG.model_copy(update={"sources": ("repeat", "item_faiss")})
    expected, unit = _expected_queries(rows)
    live = {r.item_id for r in live_items(mined, config).collect()}
    seen = {(r["user_id"], r["item_id"]) for r in rows}
    found = item_faiss_candidates(spark, mined, live_items(mined, config), config,
                                  seen_lists(mined)).collect()
    skipped = 0
    for user, query in expected.items():
        scores = {i: float(query @ unit[i]) for i in live}
        nearest = sorted(scores, key=lambda i: -scores[i])[:2 * K]
        top = [i for i in nearest if (user, i) not in seen][:K]
        skipped += len([i for i in nearest[:K] if (user, i) in seen])
        got = sorted((r for r in found if r.user_id == user), key=lambda r: -r.v)
        assert [r.item_id for r in got] == top
    assert skipped > 0  # the plain pools held the users' own items: the skip was exercised


def test_item_faiss_alone_is_tagged_within_budget_and_deterministic(spark, mined):
    mined, _ = mined
    runs = [sorted(tuple(r) for r in speculate_frames(spark, mined, CONFIG).pairs.collect())
            for _ in range(2)]
    assert runs[0] == runs[1] and runs[0]
    assert all(sources == ["item_faiss"] for _, _, _, sources in runs[0])
    per_user = [u for u, *_ in runs[0]]
    assert max(per_user.count(u) for u in set(per_user)) <= CONFIG.budget_per_user


def test_without_factors_the_source_is_skipped(spark, mined):
    mined, _ = mined
    bare = Mined(mined.asof, mined.pair_stats, mined.item_stats, mined.user_stats,
                 mined.cooccurrence)
    assert gather(spark, bare, CONFIG).pairs.count() == 0


def _vectors(spark, key: str, ids, seed: int):
    rng = np.random.default_rng(seed)
    vectors = {i: rng.standard_normal(DIM).astype(np.float32) for i in ids}
    frame = spark.createDataFrame([(i, [float(x) for x in v]) for i, v in vectors.items()],
                                  f"{key} long, factor array<float>")
    return frame, vectors


def test_faiss_searches_the_choice_vectors_and_als_without_them(spark, mined):
    mined, _ = mined
    config = CONFIG.model_copy(update={"sources": ("faiss",)})
    wired = CONFIG.model_copy(update={"sources": ("repeat", "faiss"), "scorer": "faiss"})
    live = {r.item_id for r in live_items(mined, config).collect()}
    als_users, als_x = _vectors(spark, "user_id", range(USERS), 21)
    als_items, als_y = _vectors(spark, "item_id", range(100, 100 + ITEMS), 22)
    choice_users, choice_x = _vectors(spark, "user_id", range(USERS), 23)
    choice_y = _vectors(spark, "item_id", range(100, 100 + ITEMS), 24)[1]
    bias = {i: 0.5 * (i % 3) for i in choice_y}  # the model's logit x . y + b orders the pools
    choice_items = spark.createDataFrame(
        [(i, [float(x) for x in v], bias[i]) for i, v in choice_y.items()],
        "item_id long, factor array<float>, bias float")
    logit_y = {i: np.append(v, bias[i]) for i, v in choice_y.items()}
    logit_x = {u: np.append(v, 1.0) for u, v in choice_x.items()}
    # the pools are searched at each item's current rate: the logit plus log(trend)
    trend = {r.item_id: float(np.log(r.trend)) for r in mined.item_stats.collect()}
    assert len(set(np.round(list(trend.values()), 6))) > 1  # the shift reorders the items
    searched_y = {i: np.append(v, bias[i] + trend.get(i, 0.0)) for i, v in choice_y.items()}
    tables = (mined.asof, mined.pair_stats, mined.item_stats, mined.user_stats,
              mined.cooccurrence, als_users, als_items)
    # choice vectors written before the bias column rank poorly alone: the ALS factors are used
    assert faiss_feature(Mined(*tables, choice_users, choice_items.drop("bias"))) == "als"
    for vectors, x, y, feature in ((Mined(*tables, choice_users, choice_items), logit_x,
                                    searched_y, "choice"),
                                   (Mined(*tables), als_x, als_y, "als")):
        assert faiss_feature(vectors) == feature
        found, _, _ = faiss_candidates(spark, vectors, live_items(vectors, config), config)
        found = found.collect()
        assert {r.source for r in found} == {"faiss"}
        assert {r.user_id for r in found} == {r.user_id for r in mined.user_stats.collect()}
        for user in {r.user_id for r in found}:
            scores = {i: float(x[user] @ y[i]) for i in live}
            top = sorted(scores, key=lambda i: -scores[i])[:K]
            got = sorted((r for r in found if r.user_id == user), key=lambda r: -r.v)
            assert [r.item_id for r in got] == top
            assert all(abs(r.v - scores[r.item_id]) < 1e-4 for r in got)
        # through the job's code: the choice feature is the logit (without the trend), and the
        # faiss ranking orders the FAISS pools and the user's own (repeat) pairs by the searched
        # inner product
        result = speculate_frames(spark, vectors, wired)
        rows = result.features.select("user_id", "item_id", "sources", "choice",
                                      "score_faiss").collect()
        own = [r for r in rows if "faiss" not in r.sources and r.score_faiss is not None]
        assert own and len(own) < len(rows)
        for r in rows:
            logit = float(logit_x[r.user_id] @ logit_y[r.item_id])
            assert abs(r.choice - (logit if feature == "choice" else 0.0)) < 1e-4
            if r.score_faiss is not None:
                assert abs(r.score_faiss - float(x[r.user_id] @ y[r.item_id])) < 1e-4
