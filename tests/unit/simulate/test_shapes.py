"""Generated log shapes: the default world's draws are untouched, and each shape has the
structure it names (checked on the written logs, not on the generator's internals)."""

import hashlib
import os
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pyarrow.dataset as ds
import pytest

from solaris_lib.logs.validate import validate_dir
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.simulate.shapes import SHAPES, shape
from solaris_lib.simulate.world import Simulator, session_counts

# Content digest of WorldConfig(users=150, items=250, days=2, seed=5): adding shapes must not
# move a single draw of the default world. p_click (float32) is compared apart, to a tolerance:
# its last bit follows the CPU's exp (the draws do not, test below).
SMALL_WORLD = {"users": 150, "items": 250, "days": 2, "seed": 5}
DEFAULT_DRAWS = "bfec138bcc98ef6136440d87c7d7fd7409f084502a18b330a30ee74bb132eaaf"
DEFAULT_P_CLICK_SUM = 360.7144299685606
COLUMNS = ("request_id", "ts", "user_id", "item_id", "position", "clicked")


def _table(folder):
    return ds.dataset(folder, format="parquet", partitioning="hive",
                      ignore_prefixes=["_", "."]).to_table()


def _draws(folder) -> tuple[str, float]:
    """(digest of the discrete columns in a fixed row order, sum of p_click)."""
    table = _table(folder).sort_by(
        [("ts", "ascending"), ("request_id", "ascending"), ("item_id", "ascending")])
    digest = hashlib.sha256()
    for name in COLUMNS:
        digest.update(name.encode())
        digest.update(str(table.column(name).to_pylist()).encode())
    return digest.hexdigest(), float(np.sum(table.column("p_click").to_numpy(), dtype=np.float64))


def test_default_world_draws_are_unchanged(tmp_path):
    Simulator(WorldConfig(**SMALL_WORLD)).run(str(tmp_path / "w"))
    digest, p_click = _draws(tmp_path / "w")
    assert digest == DEFAULT_DRAWS
    assert p_click == pytest.approx(DEFAULT_P_CLICK_SUM, rel=1e-6)


def test_the_world_does_not_depend_on_numpys_simd_extensions(tmp_path):
    """numpy picks its sort and partition kernels by the CPU's SIMD extensions, and their
    order of equal or unordered results differs: the same seed must give the same world on
    every machine. Here: the dispatched extensions this CPU has switched off, against the
    digest above (drawn with them on)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    found = [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]
    if not found:
        pytest.skip("this CPU runs numpy's baseline kernels only: nothing to switch off")
    code = ("from solaris_lib.simulate.config import WorldConfig\n"
            "from solaris_lib.simulate.world import Simulator\n"
            f"Simulator(WorldConfig(**{SMALL_WORLD!r})).run({str(tmp_path / 'off')!r})")
    env = {key: value for key, value in os.environ.items() if key != "NPY_ENABLE_CPU_FEATURES"}
    env["NPY_DISABLE_CPU_FEATURES"] = " ".join(
        [*os.environ.get("NPY_DISABLE_CPU_FEATURES", "").split(), *found])
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True)
    assert child.returncode == 0, child.stderr
    assert _draws(tmp_path / "off")[0] == DEFAULT_DRAWS


def test_session_counts_keep_the_mean_and_come_in_bursts():
    rng = np.random.default_rng(0)
    lam = np.full((4000, 6), 0.5)
    counts = session_counts(lam, 8.0, rng)
    assert counts.mean() == pytest.approx(0.5, rel=0.05)
    # a compound Poisson of geometric bursts (mean m) has variance lam * (2m - 1)
    assert counts.var() == pytest.approx(0.5 * 15, rel=0.1)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return {name: (shape(name, "test"), root / name, shape(name, "test").write(str(root / name)))
            for name in SHAPES}


def test_every_shape_writes_contract_logs(written):
    for spec, folder, rows in written.values():
        reports = validate_dir(str(folder))
        assert rows > 0 and reports
        assert all(r.error is None and r.rows_quarantined == 0 for r in reports)
        end = spec.world.start + timedelta(days=spec.world.days)
        assert all(spec.world.start < c < end for c in spec.cutoffs)


def test_ratings_have_one_row_per_pair_and_no_positions_or_clicks(written):
    spec, folder, _ = written["ratings"]
    table = _table(folder)
    assert "position" not in table.column_names and "clicked" not in table.column_names
    pairs = np.stack([table.column("user_id").to_numpy(), table.column("item_id").to_numpy()], 1)
    assert len(np.unique(pairs, axis=0)) == len(pairs)
    assert len(set(table.column("request_id").to_pylist())) == table.num_rows


def _requests_per_user_hour(folder) -> np.ndarray:
    table = _table(folder).select(["request_id", "user_id", "ts"]).to_pandas().drop_duplicates(
        "request_id")
    return table.groupby(["user_id", table.ts.dt.floor("h")]).size().to_numpy()


def test_sessions_come_in_bursts_and_long_lived_items_last(written):
    bursty = _requests_per_user_hour(written["sessions"][1])
    plain = _requests_per_user_hour(written["impressions"][1])
    assert np.mean(bursty >= 3) > 3 * np.mean(plain >= 3)

    def median_span_days(folder):
        table = _table(folder).select(["item_id", "ts"]).to_pandas()
        span = table.groupby("item_id").ts.agg(lambda t: (t.max() - t.min()).total_seconds())
        return float(np.median(span)) / 86400

    assert median_span_days(written["long_lived"][1]) > median_span_days(written["impressions"][1])
