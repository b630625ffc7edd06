"""The served cache on a tiny world: the speculation run for t-1 reads nothing at or after the
start of t; the fallback job writes its three tables (both embedder paths agree)."""

from __future__ import annotations

import shutil
from datetime import timedelta

import numpy as np
import pyarrow.parquet as pq
import pytest

from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.logs.schema import parse_hour_partition
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.transfer.config import TransferConfig
from tests.sparkcache import cached_frames

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

torch = pytest.importorskip("torch")

START = WorldConfig().start
SERVED = Interval(START + timedelta(hours=48), START + timedelta(hours=60))
CONFIG = TransferConfig(interval=timedelta(hours=12), lookback=timedelta(days=2),
                        budget_per_user=30, clusters=8)


def _truncated(src, dst, cut):
    """Copy of the logs without any hour partition at or after ``cut``."""
    def ignore(folder, names):
        return [n for n in names
                if (h := parse_hour_partition(f"{folder}/{n}/")) is not None and h >= cut
                and n.startswith("hour=")]
    shutil.copytree(src, dst, ignore=ignore)
    return dst


@pytest.fixture(scope="module")
def caches(spark, tiny_world, tmp_path_factory):
    from solaris_lib.transfer.cache import Speculator

    cut_logs = _truncated(tiny_world, tmp_path_factory.mktemp("cut") / "logs", SERVED.start)
    retrieval_asof = SERVED.start - CONFIG.interval
    spark.catalog.clearCache()
    served = []
    for logs in (tiny_world, cut_logs):
        speculator = Speculator(spark, str(logs), CONFIG, retrieval_asof)
        served.append(speculator.serve(SERVED))
        speculator.close()
        assert not cached_frames(spark), "Speculator.close left cached frames in the session"
    return tuple(served)


def test_the_cache_of_t_does_not_depend_on_logs_of_t(caches):
    full, cut = caches
    assert len(full.pair_users) > 100
    np.testing.assert_array_equal(full.pair_users, cut.pair_users)
    np.testing.assert_array_equal(full.pair_items, cut.pair_items)
    np.testing.assert_array_equal(full.clusters.cluster_ids, cut.clusters.cluster_ids)
    assert full.scorer == "learned"


def test_levels_follow_the_cache(caches):
    full, _ = caches
    users, items = full.pair_users[:50], full.pair_items[:50]
    level, _ = full.levels(users, items, fallback=True)
    assert (level == 0).all()
    from solaris_lib.transfer.cache import ITEM, MISS

    unknown_user = np.full(5, 10**9, np.int64)
    level, _ = full.levels(unknown_user, items[:5], fallback=True)
    assert (level == ITEM).all()  # live items: their prior
    level, _ = full.levels(unknown_user, np.full(5, 10**12, np.int64), fallback=True)
    assert (level == MISS).all()  # unknown items: nothing


@pytest.fixture(scope="module")
def pipeline_root(spark, tiny_world, tmp_path_factory):
    """mine / retrieval / speculate partitions of SERVED written by the pipeline's jobs."""
    from solaris_lib.speculation.config import MineConfig, RetrievalConfig, SpeculateConfig
    from solaris_lib.speculation.pipeline import run_mine, run_retrieval, run_speculate

    root = tmp_path_factory.mktemp("transfer-data")
    (root / "logs").symlink_to(tiny_world)
    layout = DataLayout(root=str(root), models_root=str(root / "models"))
    mine = MineConfig(lookback=timedelta(days=2))
    run_mine(spark, layout, SERVED, mine)
    run_retrieval(spark, layout, SERVED, RetrievalConfig(lookback=timedelta(days=2), rank=8,
                                                          max_iter=5))
    run_speculate(spark, layout, SERVED, SpeculateConfig(budget_per_user=20))
    return root


def test_infer_cluster_embeddings_writes_the_three_tables(spark, pipeline_root):
    from solaris_lib.config import load_settings
    from solaris_lib.model import artefact
    from solaris_lib.model.config import FoundationConfig
    from solaris_lib.model.network import FoundationNet
    from solaris_lib.model.online import FoundationEmbedder, History
    from solaris_lib.storage import is_complete
    from solaris_lib.transfer.fallback import infer_cluster_embeddings

    settings = load_settings(data_root=str(pipeline_root))
    layout = DataLayout.from_settings(settings)
    torch.manual_seed(0)
    cfg = FoundationConfig.preset("test")
    net = FoundationNet(cfg).eval()
    model_root = layout.model("foundation")
    artefact.write_version(model_root, "v-test", net.state_dict(), cfg, {}, {})
    artefact.set_serving(model_root, "v-test")

    driver = infer_cluster_embeddings(spark, settings, SERVED,
                                      FoundationEmbedder(net, "v-test", "cpu"), k=6)
    cl_path = layout.output(EMBEDDINGS, SERVED, "cluster")
    items_path = layout.output(EMBEDDINGS, SERVED, "item_clusters")
    assert is_complete(cl_path) and is_complete(items_path)
    first = pq.read_table(cl_path).sort_by([("user_id", "ascending"), ("cluster_id", "ascending")])
    assert driver["rows_written"] == driver["users"] * driver["clusters"] == first.num_rows
    assert first.schema.field("cluster_id").type == "int32"
    assert set(len(b) for b in first.column("embedding").to_pylist()) == {2 * cfg.dim}
    items = pq.read_table(items_path)
    assert items.num_rows == driver["items"]
    assert set(items.column("cluster_id").to_pylist()) == set(range(driver["clusters"]))
    prior_path = layout.output(EMBEDDINGS, SERVED, "item_prior")
    priors = pq.read_table(prior_path).sort_by("item_id")
    assert driver["item_priors"] == priors.num_rows == items.num_rows
    assert priors.column("item_id").equals(items.sort_by("item_id").column("item_id"))
    embedder = FoundationEmbedder(net, "v-test", "cpu")
    some = priors.column("item_id").to_pylist()[::7]
    want = embedder.embed_user(History.of([], [], []), some, SERVED.end).astype("<f2")
    got = np.frombuffer(b"".join(priors.column("embedding").to_pylist()[::7]), "<f2")
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32).ravel(),
                               rtol=0, atol=2e-3)

    spark_path = infer_cluster_embeddings(spark, settings, SERVED, None, k=6)  # serving version
    second = pq.read_table(cl_path).sort_by([("user_id", "ascending"),
                                             ("cluster_id", "ascending")])
    assert spark_path["rows_written"] == driver["rows_written"]
    a = np.frombuffer(b"".join(first.column("embedding").to_pylist()), "<f2").astype(np.float32)
    b = np.frombuffer(b"".join(second.column("embedding").to_pylist()), "<f2").astype(np.float32)
    assert np.abs(a - b).max() <= 2e-3
    assert first.column("user_id").equals(second.column("user_id"))
    spark_priors = pq.read_table(prior_path).sort_by("item_id")
    assert spark_path["item_priors"] == priors.num_rows
    assert spark_priors.column("item_id").equals(priors.column("item_id"))
    a = np.frombuffer(b"".join(priors.column("embedding").to_pylist()), "<f2")
    b = np.frombuffer(b"".join(spark_priors.column("embedding").to_pylist()), "<f2")
    assert np.abs(a.astype(np.float32) - b.astype(np.float32)).max() <= 2e-3
