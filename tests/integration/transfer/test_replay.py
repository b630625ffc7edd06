"""The replayed pipeline on the tiny world: the cache of t is made by the production stages of
the run for t - 1, reads no log at or after the start of t, holds the FM's embeddings as of that
start, and is served at the same levels, with the same values, by the real client after the
real publisher stored it in Redis."""

from __future__ import annotations

import shutil
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from solaris_lib.fallback import Level
from solaris_lib.intervals import Interval
from solaris_lib.layout import (
    CLUSTER_EMBEDDINGS,
    EMBEDDINGS,
    ITEM_CLUSTERS,
    ITEM_PRIORS,
    SPECULATED,
)
from solaris_lib.logs.schema import parse_hour_partition
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.transfer.config import TransferConfig
from tests.sparkcache import cached_frames

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

torch = pytest.importorskip("torch")

START = WorldConfig().start
SERVED = Interval(START + timedelta(hours=48), START + timedelta(hours=60))
RUN = SERVED.previous()  # the precompute run whose tables serve SERVED
CONFIG = TransferConfig(interval=timedelta(hours=12), lookback=timedelta(days=2),
                        budget_per_user=30, clusters=8, scorer="learned")


def _truncated(src, dst, cut):
    """Copy of the logs without any hour partition at or after ``cut``."""
    def ignore(folder, names):
        return [n for n in names
                if (h := parse_hour_partition(f"{folder}/{n}/")) is not None and h >= cut
                and n.startswith("hour=")]
    shutil.copytree(src, dst, ignore=ignore)
    return dst


@pytest.fixture(scope="module")
def fm():
    from solaris_lib.model.config import FoundationConfig
    from solaris_lib.model.network import FoundationNet
    from solaris_lib.model.online import FoundationEmbedder

    torch.manual_seed(0)
    return FoundationEmbedder(FoundationNet(FoundationConfig.preset("test")), "v-test", "cpu")


@pytest.fixture(scope="module")
def replays(spark, tiny_world, fm, tmp_path_factory):
    """(replay, cache) on the whole logs, then on the logs cut at the start of SERVED."""
    from solaris_lib.transfer.replay import Replay

    cut_logs = _truncated(tiny_world, tmp_path_factory.mktemp("cut") / "logs", SERVED.start)
    spark.catalog.clearCache()
    out = []
    for logs in (tiny_world, cut_logs):
        replay = Replay(spark, str(logs), str(tmp_path_factory.mktemp("replay")), fm, CONFIG)
        out.append((replay, replay.serve(SERVED)))
        assert not cached_frames(spark), "the replayed stages left cached frames in the session"
    return out


def test_the_cache_of_t_does_not_depend_on_logs_of_t(replays):
    (_, full), (_, cut) = replays
    assert len(full.exact) > 100 and full.scorer == "learned"
    for name in ("exact", "cluster", "priors"):
        a, b = getattr(full, name), getattr(cut, name)
        np.testing.assert_array_equal(a.keys, b.keys, err_msg=name)
        np.testing.assert_array_equal(a.values, b.values, err_msg=name)
    np.testing.assert_array_equal(full.clusters.cluster_ids, cut.clusters.cluster_ids)


def _history_before(logs: pa.Table, user: int, start, lookback):
    """The user's shown events in ``[start - lookback, start)``, oldest first (independent of
    the mined user history)."""
    from solaris_lib.model.online import History

    rows = logs.filter(pc.equal(logs.column("user_id"), user)).to_pylist()
    shown = sorted((r["ts"], r["item_id"], r["clicked"]) for r in rows
                   if r["position"] is not None and start - lookback <= r["ts"] < start)
    return History.of([s[1] for s in shown], [s[0] for s in shown], [s[2] for s in shown])


def test_served_values_are_the_fm_as_of_the_start(replays, tiny_world, fm):
    from solaris_lib.model.online import History

    (_, cache), _ = replays
    logs = pq.read_table(tiny_world)
    users = cache.exact.keys["a"][::97][:12]
    items = cache.exact.keys["b"][::97][:12]
    level, emb = cache.lookup(users, items)
    assert (level == Level.EXACT).all()
    for k, (user, item) in enumerate(zip(users.tolist(), items.tolist(), strict=True)):
        want = fm.embed_user(_history_before(logs, user, SERVED.start, CONFIG.lookback), [item],
                             SERVED.start).astype("<f2").astype(np.float32)[0]
        np.testing.assert_allclose(emb[k], want, rtol=0, atol=2e-3)
    unknown = np.full(5, 10**12, np.int64)
    live = cache.clusters.item_ids[::11][:5]
    level, emb = cache.lookup(unknown, live)
    assert (level == Level.ITEM).all()  # users the run did not speculate: the items' priors
    want = fm.embed_user(History.of([], [], []), live.tolist(), SERVED.start).astype("<f2")
    np.testing.assert_allclose(emb, want.astype(np.float32), rtol=0, atol=2e-3)
    level, _ = cache.lookup(users[:3], np.full(3, 10**12, np.int64))
    assert (level == Level.MISS).all()  # items in no cluster: nothing


def test_the_infer_stage_wrote_the_three_fallback_tables(replays):
    (replay, cache), _ = replays
    out = {name: pq.read_table(replay.layout.output(EMBEDDINGS, RUN, name))
           for name in (CLUSTER_EMBEDDINGS, ITEM_CLUSTERS, ITEM_PRIORS)}
    speculated = pq.read_table(replay.layout.output(SPECULATED, RUN)).column("user_id")
    clusters = set(out[ITEM_CLUSTERS].column("cluster_id").to_pylist())
    assert clusters == set(range(len(clusters))) and 8 <= len(clusters) <= 8 + 4
    cluster = out[CLUSTER_EMBEDDINGS]
    assert cluster.num_rows == len(pc.unique(speculated)) * len(clusters)
    assert cluster.schema.field("cluster_id").type == pa.int32()
    assert {len(b) for b in cluster.column("embedding").to_pylist()} == {2 * replay.fm.dim}
    assert set(cluster.column("model_version").to_pylist()) == {"v-test"}
    priors = out[ITEM_PRIORS].sort_by("item_id")
    assert priors.column("item_id").equals(out[ITEM_CLUSTERS].sort_by("item_id").column("item_id"))
    assert len(cache.priors) == priors.num_rows and len(cache.cluster) == cluster.num_rows


def test_the_client_serves_what_the_report_reads(spark, replays, tiny_world, redis_url,
                                                 key_prefix):
    from solaris_lib.cache.publish import PublishConfig, publish
    from solaris_lib.client import SolarisClient
    from solaris_lib.config import load_settings
    from tests.budgets import TEST_TIMEOUT_MS

    (replay, cache), _ = replays
    settings = load_settings(data_root=replay.settings.data_root, redis_url=redis_url,
                             redis_key_prefix=key_prefix)
    report = publish(spark, settings, RUN, PublishConfig(ttl_s=600))
    assert report.status == "published"
    logs = pq.read_table(tiny_world, columns=["user_id", "item_id", "ts"])
    s_us = int(SERVED.start.timestamp() * 1e6)
    ts = logs.column("ts").cast(pa.int64()).to_numpy()
    in_t = logs.filter(pa.array((ts >= s_us) & (ts < s_us + 12 * 3600 * 10**6)))
    items = np.unique(in_t.column("item_id").to_numpy())[:150]
    users = np.concatenate([cache.users[::9][:25], np.setdiff1d(
        np.unique(in_t.column("user_id").to_numpy()), cache.users)[:5], [10**12]])
    seen = {level: 0 for level in Level}
    with SolarisClient.from_url(redis_url, key_prefix=key_prefix, timeout_ms=TEST_TIMEOUT_MS,
                                miss_sample_rate=0) as client:
        assert client.version == report.version
        for user in users.tolist():
            asked = np.append(items, [10**12])
            got = client.lookup(user, asked)
            level, emb = cache.lookup(np.full(len(asked), user), asked)
            np.testing.assert_array_equal(got.level, level, err_msg=str(user))
            np.testing.assert_array_equal(got.embeddings, emb, err_msg=str(user))
            for code, count in zip(*np.unique(level, return_counts=True), strict=True):
                seen[Level(code)] += int(count)
    assert all(seen.values()), seen  # every level was compared
