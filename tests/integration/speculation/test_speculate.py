"""mine -> retrieval -> speculate on a tiny simulated world: contract, budgets, reruns, scorer."""

from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.errors import EmptyInputError
from solaris_lib.intervals import Interval
from solaris_lib.layout import RETRIEVAL, SPECULATED, DataLayout
from solaris_lib.logs.reader import read_window
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.speculation.choice import fit_choice
from solaris_lib.speculation.config import SOURCES, MineConfig, RetrievalConfig, SpeculateConfig
from solaris_lib.speculation.io import newest_trained_by, trained_until
from solaris_lib.speculation.pipeline import (
    history_window,
    load_factors,
    run_mine,
    run_retrieval,
    run_speculate,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START = WorldConfig().start
INTERVAL = Interval(START + timedelta(hours=40), START + timedelta(hours=44))
MINE = MineConfig(lookback=timedelta(days=2))
SPEC = SpeculateConfig(budget_per_user=30, global_budget=5000, faiss_k=40, cooc_per_user=40)
RETRIEVAL_CFG = RetrievalConfig(lookback=timedelta(days=2), max_iter=5, rank=8)


@pytest.fixture(scope="module")
def layout(tiny_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("spec-data")
    (root / "logs").symlink_to(tiny_world)
    return DataLayout(root=str(root), models_root=str(root / "models"))


@pytest.fixture(scope="module")
def speculated(spark, layout):
    run_mine(spark, layout, INTERVAL.previous(), MINE)
    run_mine(spark, layout, INTERVAL, MINE)
    run_retrieval(spark, layout, INTERVAL.previous(), RETRIEVAL_CFG)
    report = run_speculate(spark, layout, INTERVAL, SPEC)
    return report, pq.read_table(layout.output(SPECULATED, INTERVAL))


def test_output_contract_and_budgets(speculated):
    report, table = speculated
    assert table.schema.field("user_id").type == pa.int64()
    assert table.schema.field("item_id").type == pa.int64()
    assert table.schema.field("score").type == pa.float64()
    sources = table.schema.field("sources").type
    assert pa.types.is_list(sources) and sources.value_type == pa.string()
    assert 0 < table.num_rows <= SPEC.global_budget
    assert report["pairs"] == table.num_rows
    users = table.column("user_id").to_pylist()
    assert max(users.count(u) for u in set(users)) <= SPEC.budget_per_user
    pairs = list(zip(users, table.column("item_id").to_pylist(), strict=True))
    assert len(set(pairs)) == len(pairs)
    assert {s for row in table.column("sources").to_pylist() for s in row} <= set(SOURCES)
    assert all(0.0 <= s <= 1.0 for s in table.column("score").to_pylist())


def test_learned_scorer_with_faiss_from_older_retrieval(speculated):
    report, table = speculated
    assert report["scorer"] == "learned"
    assert report["faiss_index"] == "flat"
    assert report["faiss_vectors"] == "choice"  # the retrieval wrote choice vectors with a bias
    assert any("faiss" in row for row in table.column("sources").to_pylist())


def test_repeats_come_from_history_and_pairs_cover_next_interval(speculated, layout):
    _, table = speculated
    history = read_window(layout.logs, Interval(INTERVAL.end - MINE.lookback, INTERVAL.end)).table
    seen = set(zip(history.column("user_id").to_pylist(), history.column("item_id").to_pylist(),
                   strict=True))
    rows = zip(table.column("user_id").to_pylist(), table.column("item_id").to_pylist(),
               table.column("sources").to_pylist(), strict=True)
    assert all((u, i) in seen for u, i, s in rows if "repeat" in s)
    assert set(table.column("user_id").to_pylist()) <= {u for u, _ in seen}
    nxt = read_window(layout.logs, INTERVAL.following()).table
    future = list(zip(nxt.column("user_id").to_pylist(), nxt.column("item_id").to_pylist(),
                      strict=True))
    chosen = set(zip(table.column("user_id").to_pylist(), table.column("item_id").to_pylist(),
                     strict=True))
    assert sum(p in chosen for p in future) / len(future) > 0.2


def test_rerun_is_identical_though_newer_vectors_were_fitted_meanwhile(spark, layout, speculated):
    """The rerun reads the retrieval partition the run read (its speculated partition records
    it), though a newer one fitted on logs up to the interval's end exists now, as after the
    daily retrieval run that starts with the hour ending at midnight."""
    report, table = speculated
    assert report["retrieval"] == INTERVAL.previous().key
    run_retrieval(spark, layout, INTERVAL,  # fitted quickly: any other vectors would do
                  RETRIEVAL_CFG.model_copy(update={"max_iter": 1, "choice_steps": 20}))
    assert newest_trained_by(layout.stage_root(RETRIEVAL), INTERVAL.end) == INTERVAL.key
    rerun = run_speculate(spark, layout, INTERVAL, SPEC)
    assert rerun["retrieval"] == rerun["retrieval_previous"] == INTERVAL.previous().key
    assert pq.read_table(layout.output(SPECULATED, INTERVAL)).equals(table)


def test_heuristic_without_previous_interval_and_error_without_mined(spark, layout):
    later = INTERVAL.shift(timedelta(hours=12))
    run_mine(spark, layout, later, MINE)
    report = run_speculate(spark, layout, later, SPEC)
    assert report["scorer"] == "heuristic" and report["pairs"] > 0
    with pytest.raises(EmptyInputError, match="run its job first"):
        run_speculate(spark, layout, later.following(), SPEC)


def _vectors(path) -> tuple[np.ndarray, np.ndarray]:
    table = pq.read_table(path)
    return table.column(0).to_numpy(), np.stack(table.column("factor").to_numpy(zero_copy_only=False))


def test_choice_vectors_match_a_fit_on_independently_weighted_rows(speculated, layout):
    """The written choice vectors and biases are the model fitted on the window's rows, each weighted
    2^(-age / 72 h) at the window's end (weights computed here from the raw logs)."""
    window = history_window(INTERVAL.previous().end, RETRIEVAL_CFG.lookback)
    rows = read_window(layout.logs, window).table.to_pandas()
    age_s = (pd.Timestamp(window.end) - rows.ts).dt.total_seconds().to_numpy()
    rows["w"] = np.exp(-np.log(2.0) * age_s / RETRIEVAL_CFG.choice_half_life.total_seconds())
    pairs = rows.groupby(["user_id", "item_id"], as_index=False)["w"].sum()
    user_ids, users = np.unique(pairs.user_id, return_inverse=True)
    item_ids, items = np.unique(pairs.item_id, return_inverse=True)
    x, y, b = fit_choice(users, items, pairs.w.to_numpy(), (len(user_ids), len(item_ids)),
                         RETRIEVAL_CFG)
    base = f"{layout.stage_root(RETRIEVAL)}/interval={INTERVAL.previous().key}"
    written_users, written_x = _vectors(f"{base}/choice_users")
    written_items, written_y = _vectors(f"{base}/choice_items")
    assert np.array_equal(written_users, user_ids) and np.array_equal(written_items, item_ids)
    assert written_y.shape == (len(item_ids), RETRIEVAL_CFG.choice_dim)
    np.testing.assert_allclose(written_x, x, atol=2e-3)
    np.testing.assert_allclose(written_y, y, atol=2e-3)
    assert trained_until(layout.stage_root(RETRIEVAL), INTERVAL.previous().key) == \
        INTERVAL.previous().end  # the end of the logs it was fitted on, read by the next runs
    written_b = pq.read_table(f"{base}/choice_items").column("bias").to_numpy()
    np.testing.assert_allclose(written_b, b, atol=2e-3)


def test_retrieval_without_the_choice_model_loads_as_none(spark, layout):
    later = INTERVAL.shift(timedelta(hours=4))
    run_retrieval(spark, layout, later, RETRIEVAL_CFG.model_copy(update={"choice": False}))
    users, items, choice_users, choice_items = load_factors(spark, layout, later, choice=True)
    assert users.count() > 0 and items.count() > 0
    assert choice_users is None and choice_items is None


def test_a_labelled_interval_without_rows_is_scored_as_unlabelled(spark, layout):
    """A quiet interval (no log rows: every ranking would cover 0 of 0 rows) validates
    nothing: the run scores as one without a labelled interval, never keeping the popular
    list for a tie at zero."""
    end = START + timedelta(days=3)  # the tiny world's last hour ends here
    quiet = Interval(end, end + timedelta(hours=4))
    for interval in (quiet.previous(), quiet):
        run_mine(spark, layout, interval, MINE)
    report = run_speculate(spark, layout, quiet, SPEC)
    assert (report["scorer"], report["validation"]) == ("heuristic", None)
    assert report["pairs"] > 0


def test_budgets_never_keep_a_nan_score(spark):
    """Spark sorts NaN above every number; the validation's numpy selection drops it: the run's
    budgets drop it too, so both select alike."""
    from solaris_lib.speculation.scorer import apply_budgets

    scored = spark.createDataFrame([(1, 10, float("nan")), (1, 11, 0.9), (1, 12, 0.5),
                                    (2, 13, None)], "user_id long, item_id long, score double")
    assert [(r.user_id, r.item_id) for r in apply_budgets(scored, 2, 10).collect()] == [
        (1, 11), (1, 12)]
