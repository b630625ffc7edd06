"""mine -> retrieval -> speculate on a tiny simulated world: contract, budgets, reruns, scorer."""

from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.errors import EmptyInputError
from solaris_lib.intervals import Interval
from solaris_lib.layout import SPECULATED, DataLayout
from solaris_lib.logs.reader import read_window
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.speculation.config import SOURCES, MineConfig, RetrievalConfig, SpeculateConfig
from solaris_lib.speculation.pipeline import run_mine, run_retrieval, run_speculate

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START = WorldConfig().start
INTERVAL = Interval(START + timedelta(hours=40), START + timedelta(hours=44))
MINE = MineConfig(lookback=timedelta(days=2))
SPEC = SpeculateConfig(budget_per_user=30, global_budget=5000, faiss_k=40, cooc_per_user=40)


@pytest.fixture(scope="module")
def layout(tiny_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("spec-data")
    (root / "logs").symlink_to(tiny_world)
    return DataLayout(root=str(root), models_root=str(root / "models"))


@pytest.fixture(scope="module")
def speculated(spark, layout):
    run_mine(spark, layout, INTERVAL.previous(), MINE)
    run_mine(spark, layout, INTERVAL, MINE)
    run_retrieval(spark, layout, INTERVAL.previous(), RetrievalConfig(lookback=timedelta(days=2),
                                                                      max_iter=5, rank=8))
    report = run_speculate(spark, layout, INTERVAL, SPEC)
    return report, pq.read_table(layout.output(SPECULATED, INTERVAL))


def test_output_contract_and_budgets(speculated):
    report, table = speculated
    assert table.schema.field("user_id").type == pa.int64()
    assert table.schema.field("item_id").type == pa.int64()
    assert table.schema.field("score").type == pa.float64()
    assert table.schema.field("sources").type == pa.list_(pa.string())
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


def test_rerun_is_identical(spark, layout, speculated):
    _, table = speculated
    run_speculate(spark, layout, INTERVAL, SPEC)
    assert pq.read_table(layout.output(SPECULATED, INTERVAL)).equals(table)


def test_heuristic_without_previous_interval_and_error_without_mined(spark, layout):
    later = INTERVAL.shift(timedelta(hours=12))
    run_mine(spark, layout, later, MINE)
    report = run_speculate(spark, layout, later, SPEC)
    assert report["scorer"] == "heuristic" and report["pairs"] > 0
    with pytest.raises(EmptyInputError, match="run its job first"):
        run_speculate(spark, layout, later.following(), SPEC)
