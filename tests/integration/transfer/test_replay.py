"""The replayed pipeline on the tiny world: the cache of t is made by the production stages of
the run for t - 1, reads no log at or after the start of t (those hours hold unreadable files
here, which any read of them would fail on), holds the FM's embeddings as of that start, and is
served at the same levels, with the same values, by the real client after the real publisher
stored it in Redis."""

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
    QUARANTINE_DIRNAME,
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


POISON = b"PAR1 not a parquet file: the replay of t read a log of t"


def _poisoned(src, dst, cut) -> list:
    """Copy of the logs whose files in hour partitions at or after ``cut`` are unreadable;
    returns those files."""
    shutil.copytree(src, dst)
    poisoned = [path for path in sorted(dst.rglob("*.parquet"))
                if (hour := parse_hour_partition(str(path))) is not None and hour >= cut]
    for path in poisoned:
        path.write_bytes(POISON)
    return poisoned


@pytest.fixture(scope="module")
def fm():
    from solaris_lib.model.config import FoundationConfig
    from solaris_lib.model.network import FoundationNet
    from solaris_lib.model.online import FoundationEmbedder

    torch.manual_seed(0)
    return FoundationEmbedder(FoundationNet(FoundationConfig.preset("test")), "v-test", "cpu")


@pytest.fixture(scope="module")
def poisoned_logs(tiny_world, tmp_path_factory):
    """(logs root, poisoned files): the tiny world with every log of SERVED onwards unreadable."""
    logs = tmp_path_factory.mktemp("poisoned") / "logs"
    return logs, _poisoned(tiny_world, logs, SERVED.start)


@pytest.fixture(scope="module")
def replayed(spark, poisoned_logs, fm, tmp_path_factory):
    """(replay, cache): the run for RUN replayed on the poisoned logs, serving SERVED."""
    from solaris_lib.transfer.replay import Replay

    spark.catalog.clearCache()
    replay = Replay(spark, str(poisoned_logs[0]), str(tmp_path_factory.mktemp("replay")), fm,
                    CONFIG)
    cache = replay.serve(SERVED)
    assert not cached_frames(spark), "the replayed stages left cached frames in the session"
    return replay, cache


def test_the_cache_of_t_reads_no_log_of_t(replayed, poisoned_logs):
    from solaris_lib.errors import LogContractError
    from solaris_lib.logs.reader import read_window

    logs, poisoned = poisoned_logs
    _, cache = replayed
    assert len(cache.exact) > 100 and cache.scorer == "learned"
    assert len(poisoned) >= 12 and all(p.read_bytes() == POISON for p in poisoned)
    assert not (logs / QUARANTINE_DIRNAME).exists()  # nothing was read, so nothing was refused
    with pytest.raises(LogContractError, match="unreadable parquet file"):
        read_window(str(logs), SERVED)  # what any stage reading a log of t would have met


def _history_before(logs: pa.Table, user: int, start, lookback):
    """The user's shown events in ``[start - lookback, start)``, oldest first (independent of
    the mined user history)."""
    from solaris_lib.model.online import History

    rows = logs.filter(pc.equal(logs.column("user_id"), user)).to_pylist()
    shown = sorted((r["ts"], r["item_id"], r["clicked"]) for r in rows
                   if r["position"] is not None and start - lookback <= r["ts"] < start)
    return History.of([s[1] for s in shown], [s[0] for s in shown], [s[2] for s in shown])


def test_served_values_are_the_fm_as_of_the_start(replayed, tiny_world, fm):
    from solaris_lib.model.online import History

    _, cache = replayed
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


def test_the_infer_stage_wrote_the_three_fallback_tables(replayed):
    replay, cache = replayed
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


def test_the_client_serves_what_the_report_reads(spark, replayed, tiny_world, redis_url,
                                                 key_prefix):
    from solaris_lib.cache.publish import PublishConfig, publish
    from solaris_lib.client import SolarisClient
    from solaris_lib.config import load_settings
    from tests.budgets import TEST_TIMEOUT_MS

    replay, cache = replayed
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
