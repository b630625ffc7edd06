"""``solaris speculation-eval`` end to end on a tiny world and on logs of other shapes.

Each run costs about a minute of Spark jobs whatever the size of the logs, so the interaction
log is evaluated once (global allocation, module-scoped) and several tests check that report."""

import contextlib
import io
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from solaris_lib.cli import main
from solaris_lib.intervals import Interval
from solaris_lib.logs.reader import read_window
from solaris_lib.simulate.config import WorldConfig
from tests.integration.speculation.builders import T0, row, write_logs
from tests.sparkcache import cached_frames

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = {"coverage", "coverage_all", "waste", "pairs_precomputed", "budget_per_user",
        "mean_future_pairs_per_user", "baselines", "best_baseline", "selected", "validation",
        "shape", "popularity_measure"}


def _run(capsys, *args) -> dict:
    assert main(["speculation-eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_on_a_tiny_world(spark, tiny_world, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SOLARIS_SPARK_MASTER", "local[2]")
    monkeypatch.setenv("SOLARIS_SPECULATE_LIVE_TAIL_SHARE", "0")  # keep the window as given
    spark.catalog.clearCache()
    cutoff = WorldConfig().start + timedelta(days=2)
    report = _run(capsys, "--logs", str(tiny_world), "--cutoff", cutoff.isoformat(),
                  "--horizon", "1d", "--lookback", "2d", "--budget-per-user", "60",
                  "--live-window", "30h", "--als-max-iter", "6", "--out", str(tmp_path / "out"),
                  "--dump-candidates", str(tmp_path / "dump"), "--scorer", "learned")
    assert KEYS <= set(report)
    assert report["live_window_s"] == 30 * 3600  # the flag and the variable reached speculate
    assert report["faiss_vectors"] == "choice"
    assert report["als"] == {"rank": 32, "max_iter": 6, "alpha": 10.0, "reg": 0.1}
    assert report["choice"] == {"enabled": True, "dim": 16, "reg": 0.02, "steps": 300,
                                "lr": 0.1, "half_life_s": 72 * 3600.0}
    _check_replay(tmp_path / "dump", report)
    dumped = pq.read_table(tmp_path / "dump" / "candidates",
                           columns=["choice", "choice_sim_short", "user_rate"]).to_pandas()
    assert (dumped != 0).mean().min() > 0.5  # the choice model and the rate reached the scorer
    assert report["selected"] == "learned" and report["validation"] is None  # as asked
    assert set(report["baselines"]) == {"repeat", "popular", "faiss", "item_faiss", "cooccurrence"}
    assert report["best_baseline"]["coverage"] == max(report["baselines"].values())
    _check_shape(report["shape"], tiny_world, cutoff, timedelta(days=2), timedelta(days=1))
    assert 0.3 < report["coverage"] <= 1.0
    assert all(0.0 < v <= 1.0 for v in report["baselines"].values())
    curve = [p["coverage"] for p in report["coverage_vs_budget"]["solaris"]]
    assert curve == sorted(curve) and curve[-1] == pytest.approx(report["coverage"])
    assert report["budget_per_user"] == 60
    assert (tmp_path / "out" / "coverage_vs_budget.png").stat().st_size > 1000
    assert (tmp_path / "out" / "speculated" / "_SUCCESS").exists()
    assert not cached_frames(spark), "the evaluation left cached frames in the session"


def _check_shape(shape, logs, cutoff, lookback, horizon) -> None:
    """The report's log shape against pandas on the raw logs."""
    table = read_window(str(logs), Interval(cutoff - lookback, cutoff + horizon)).table.select(
        ["ts", "user_id", "item_id"]).to_pandas()
    before = table[table.ts < cutoff]
    after = table[table.ts >= cutoff]
    known = after[after.user_id.isin(set(before.user_id))]
    seen = set(zip(before.user_id, before.item_id, strict=True))
    repeat = [(u, i) in seen for u, i in zip(known.user_id, known.item_id, strict=True)]
    assert shape["repeat_share"] == pytest.approx(sum(repeat) / len(known))
    distinct = known.drop_duplicates(["user_id", "item_id"])
    new = [(u, i) not in seen for u, i in zip(distinct.user_id, distinct.item_id, strict=True)]
    assert shape["new_pair_share"] == pytest.approx(sum(new) / len(distinct))
    assert shape["new_item_share"] == pytest.approx(
        (~known.item_id.isin(set(before.item_id))).mean())
    assert shape["known_row_share"] == pytest.approx(len(known) / len(after))
    pairs = before.groupby(["user_id", "item_id"]).size()
    assert shape["rows_per_pair"] == pytest.approx(len(before) / len(pairs))
    assert shape["density"] == pytest.approx(
        len(pairs) / (before.user_id.nunique() * before.item_id.nunique()))


def _check_replay(dump, report) -> None:
    """benchmarks/scorer_replay.py on the run's dump selects what the run selected."""
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "scorer_replay.py"
    done = subprocess.run([sys.executable, str(script), "--dump", str(dump), "--interact",
                           "user_act:als", "--drop", "miss"], capture_output=True, text=True,
                          check=True)
    replayed = json.loads(done.stdout.strip().splitlines()[-1])
    assert replayed["spark"]["per_user"] == pytest.approx(report["coverage"], abs=1e-4)
    assert replayed["candidates"] == report["candidates"]
    for name in ("floor", "variant"):  # a refit of the same model lands near the run's
        assert abs(replayed[name]["per_user"] - report["coverage"]) < 0.05
        assert replayed[name]["per_user"] <= replayed["perfect"]["per_user"]
    assert "user_act*als" in replayed["variant_weights"] and "miss" not in replayed["variant_weights"]


def _interaction_log():
    """One row per interaction (like a ratings log): no positions or clicks, no repeated pairs,
    and users 90+ who appear only after the cutoff."""
    rows, n = [], 0
    for user in range(30):
        for k in range(12):
            item = (user * 3 + k * 5) % 60
            rows.append(row(f"q{n}", k * 7.0 + user * 0.1, user, item))
            n += 1
    for user in range(90, 95):
        rows.append(row(f"q{n}", 100.0, user, 1))
        n += 1
    return rows


KNOWN = 30  # users 0-29 have history before the cutoff; 90-94 appear only after it
GLOBAL_BUDGET_PER_USER = 4


@pytest.fixture(scope="module")
def interaction_logs(tmp_path_factory):
    return write_logs(tmp_path_factory.mktemp("interactions") / "logs", _interaction_log(),
                      drop=("position", "clicked"))


@pytest.fixture(scope="module")
def global_run(interaction_logs, tmp_path_factory):
    """(report, out folder) of one run with --allocation global on the interaction log."""
    out = tmp_path_factory.mktemp("global") / "out"
    cutoff = T0 + timedelta(hours=60)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["speculation-eval", "--logs", str(interaction_logs), "--cutoff",
                     cutoff.isoformat(), "--horizon", "2d", "--lookback", "10d",
                     "--budget-per-user", str(GLOBAL_BUDGET_PER_USER), "--allocation", "global",
                     "--out", str(out), "--json"])
    assert code == 0
    return json.loads(printed.getvalue().strip().splitlines()[-1]), out


def test_on_interaction_logs_without_repeats_or_clicks(global_run):
    report, _ = global_run
    assert KEYS <= set(report)
    validation = report["validation"]  # every ranking scored on the labelled split, best kept
    assert report["selected"] == validation["selected"]
    assert {"learned", "heuristic", "repeat", "popular", "faiss"} <= set(validation["coverage"])
    kept = report["selected"]  # textbook popularity, or a ranking that beat it clearly
    assert kept == "popular" or validation["margins"][kept] > 1.0
    assert all(validation["margins"][n] <= 1.0 or validation["coverage"][n]
               <= validation["coverage"][kept] for n in validation["margins"])
    assert report["shape"]["rows_per_pair"] == 1.0  # no repeated pairs in this log
    assert report["coverage_all"] < report["coverage"] or report["coverage"] == 0.0
    assert report["pairs_precomputed"] <= KNOWN * GLOBAL_BUDGET_PER_USER


def test_a_single_source_ranking_selects_what_its_baseline_selects(interaction_logs, capsys):
    """--scorer popular keeps the popular ranking: the run's pairs are its baseline's, so the
    coverage (coverage_metrics on the written pairs) equals the baseline (the numpy selection
    of the same ranking), to the row."""
    report = _run(capsys, "--logs", str(interaction_logs), "--cutoff",
                  (T0 + timedelta(hours=60)).isoformat(), "--horizon", "2d", "--lookback", "10d",
                  "--budget-per-user", "3", "--scorer", "popular", "--sources", "repeat,popular")
    assert report["selected"] == "popular" and set(report["baselines"]) == {"repeat", "popular"}
    assert report["coverage"] > 0
    assert report["coverage"] == pytest.approx(report["baselines"]["popular"], abs=1e-12)
    assert report["pairs_precomputed"] == 3 * KNOWN


def test_cutoff_before_any_log_is_a_clear_empty_result(interaction_logs, capsys):
    report = _run(capsys, "--logs", str(interaction_logs), "--cutoff",
                  (T0 - timedelta(days=1)).isoformat(),
                  "--horizon", "1d", "--lookback", "2d", "--budget-per-user", "5")
    assert report["pairs_precomputed"] == 0 and report["coverage"] is None
    assert "no history" in report["note"]


def test_bad_live_knobs_exit_2_before_any_spark_work(interaction_logs, monkeypatch, capsys):
    base = ["speculation-eval", "--logs", str(interaction_logs), "--cutoff", "2026-01-05",
            "--budget-per-user", "5"]
    assert main([*base, "--live-gaps", "-1"]) == 2
    assert "live_gaps" in capsys.readouterr().err
    monkeypatch.setenv("SOLARIS_SPECULATE_LIVE_TAIL_SHARE", "1.5")
    assert main(base) == 2
    assert "speculate_live_tail_share" in capsys.readouterr().err


def test_missing_folder_exits_2(tmp_path):
    assert main(["speculation-eval", "--logs", str(tmp_path / "nope"), "--cutoff", "2026-01-05",
                 "--budget-per-user", "5"]) == 2


def test_global_allocation_shares_the_same_total_by_score(global_run):
    import pyarrow.parquet as pq

    report, out = global_run
    total = GLOBAL_BUDGET_PER_USER * KNOWN
    assert report["allocation"] == "global" and report["global_budget"] == total
    pairs = pq.read_table(out / "speculated").to_pandas()
    per_user = pairs.groupby("user_id").size()
    assert len(pairs) == report["pairs_precomputed"] <= total
    assert per_user.max() <= 4 * GLOBAL_BUDGET_PER_USER and set(per_user.index) <= set(range(KNOWN))
