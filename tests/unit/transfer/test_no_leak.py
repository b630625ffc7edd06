"""Training never sees an embedding that serving would not have had.

A constructed interval and its served cache: some logged pairs were precomputed (their tables
hold the FM's output for the user's history strictly before the interval start, fp16 as
published), others were not. The ranker's feature matrix must carry an embedding and hit=1
exactly for the precomputed pairs, zeros and hit=0 for the others, and each embedding must be
the served one, even though the user keeps clicking inside the interval. With the fallback, a
speculated user's other live items get the cluster level, an unspeculated user's live items the
ITEM level (the item's prior: the FM with an empty history), and items without a cluster stay
misses. (That the served tables themselves read nothing at or after the start is checked on the
replayed pipeline: tests/integration/transfer/test_replay.py.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from solaris_lib.fallback import ItemClusters, Level  # noqa: E402
from solaris_lib.intervals import Interval  # noqa: E402
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA  # noqa: E402
from solaris_lib.model.config import FoundationConfig  # noqa: E402
from solaris_lib.model.examples import build_examples  # noqa: E402
from solaris_lib.model.network import FoundationNet  # noqa: E402
from solaris_lib.model.online import FoundationEmbedder, History  # noqa: E402
from solaris_lib.transfer.config import TransferConfig  # noqa: E402
from solaris_lib.transfer.features import interval_rows  # noqa: E402
from solaris_lib.transfer.ranker import dense_inputs  # noqa: E402
from solaris_lib.transfer.replay import KeyedValues, ServedCache  # noqa: E402

EXACT, CLUSTER, ITEM, MISS = Level.EXACT, Level.CLUSTER, Level.ITEM, Level.MISS

START = datetime(2026, 1, 6, 12, tzinfo=UTC)
INTERVAL = Interval(START, START + timedelta(hours=6))


def _logs() -> pa.Table:
    """Users 1..4; requests before and inside the interval, each with 4 shown candidates."""
    rng = np.random.default_rng(11)
    rows = []
    for r in range(60):
        user = 1 + r % 4
        ts = START - timedelta(hours=30) + timedelta(minutes=37 * r)  # spans both sides of START
        items = rng.choice(np.arange(100, 130), 4, replace=False)
        for pos, item in enumerate(items):
            rows.append((f"r{r}", ts, user, int(item), pos, bool(rng.random() < 0.3)))
    cols = list(zip(*rows, strict=True))
    return pa.table([pa.array(c, f.type) for c, f in zip(cols, REQUEST_LOG_SCHEMA, strict=True)],
                    schema=REQUEST_LOG_SCHEMA)


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    fm = FoundationEmbedder(FoundationNet(FoundationConfig.preset("test")), "v-test", "cpu")
    table = _logs()
    examples = build_examples(table)
    s_us = int(START.timestamp() * 1e6)
    inside = examples.select((examples.ts_us >= s_us)
                             & (examples.ts_us < s_us + int(6 * 3600 * 1e6)))
    pair_users = np.repeat(inside.user, np.diff(inside.t_offsets))
    logged = sorted(set(zip(pair_users.tolist(), inside.t_items.tolist(), strict=True)))
    chosen = logged[::3]  # a third of the logged pairs were precomputed; user 4 not at all
    chosen = [p for p in chosen if p[0] != 4]
    cu = np.array([u for u, _ in chosen], np.int64)
    ci = np.array([i for _, i in chosen], np.int64)
    items = np.arange(100, 128, dtype=np.int64)  # 128 and 129 are unknown to the run
    cache = _served(fm, table, cu, ci, items, REPRESENTATIVES)
    logits = np.zeros(examples.pairs)
    rows = interval_rows(examples, logits, table.column("user_id").to_numpy(),
                         table.column("item_id").to_numpy(),
                         table.column("ts").cast(pa.int64()).to_numpy(), cache, 0,
                         TransferConfig())
    return fm, table, cache, set(chosen), rows


REPRESENTATIVES = np.array([102, 100, 101])  # of clusters 0, 1, 2 (cluster = item % 3)


def _served(fm, table, users, items, live, reps) -> ServedCache:
    """The tables a run would have published: the chosen pairs, every (speculated user,
    cluster) and every live item's prior, each the FM's output as of START in fp16."""
    exact = np.stack([_fm_before_start(fm, table, int(u), [int(i)])[0]
                      for u, i in zip(users, items, strict=True)])
    speculated = np.unique(users)
    cu = np.repeat(speculated, len(reps))
    cc = np.tile(np.arange(len(reps)), len(speculated))
    cluster = np.stack([_fm_before_start(fm, table, int(u), [int(reps[c])])[0]
                        for u, c in zip(cu, cc, strict=True)])
    prior = fm.embed_user(History.of([], [], []), live.tolist(), START).astype("<f2")
    return ServedCache(INTERVAL, KeyedValues.of(users, items, exact.astype("<f2")),
                       KeyedValues.of(cu, cc, cluster.astype("<f2")),
                       KeyedValues.of(live, np.zeros(len(live), np.int64), prior),
                       ItemClusters(live, (live % 3).astype(np.int32)), speculated, "heuristic")


def _fm_before_start(fm, table, user, items):
    """The FM's embedding from the user's events strictly before START (independent path)."""
    t = table.filter(pa.compute.equal(table.column("user_id"), user)).to_pylist()
    shown = sorted((r["ts"], r["item_id"], r["clicked"]) for r in t
                   if r["position"] is not None and r["ts"] < START)
    history = History.of([s[1] for s in shown], [s[0] for s in shown], [s[2] for s in shown])
    return fm.embed_user(history, items, START).astype("<f2").astype(np.float32)


def test_rows_cover_exactly_the_interval(setup):
    _, _, _, _, rows = setup
    s_us = int(START.timestamp() * 1e6)
    assert len(rows) > 20
    assert (rows.ts_us >= s_us).all() and (rows.ts_us < s_us + int(6 * 3600 * 1e6)).all()


def test_hit_flag_and_embedding_only_for_precomputed_pairs(setup):
    fm, _, _, chosen, rows = setup
    precomputed = np.array([(u, i) in chosen for u, i in zip(rows.users, rows.items, strict=True)])
    assert precomputed.any() and (~precomputed).any()
    x = dense_inputs(rows, "solaris")  # the feature matrix the solaris ranker trains on
    emb, hit = x[:, 2:2 + fm.dim], x[:, 2 + fm.dim]
    np.testing.assert_array_equal(hit, precomputed.astype(np.float32))
    assert (emb[~precomputed] == 0).all()
    assert (np.abs(emb[precomputed]).sum(1) > 0).all()
    np.testing.assert_array_equal(rows.exact_level == EXACT, precomputed)


def test_embedding_equals_the_fm_at_the_interval_start(setup):
    fm, table, _, _, rows = setup
    hits = np.flatnonzero(rows.exact_level == EXACT)
    for k in hits:
        expected = _fm_before_start(fm, table, int(rows.users[k]), [int(rows.items[k])])[0]
        np.testing.assert_allclose(rows.exact_emb[k], expected, rtol=0, atol=2e-3)


def test_fallback_levels_and_cluster_embeddings(setup):
    fm, table, cache, chosen, rows = setup
    speculated_user = np.isin(rows.users, cache.users)
    precomputed = rows.exact_level == EXACT
    live = rows.items < 128
    np.testing.assert_array_equal(rows.fallback_level == CLUSTER,
                                  speculated_user & ~precomputed & live)
    np.testing.assert_array_equal(rows.fallback_level == ITEM, ~speculated_user & live)
    np.testing.assert_array_equal(rows.fallback_level == MISS, ~precomputed & ~live)
    assert (rows.users[rows.fallback_level == ITEM] == 4).all()
    for level in (CLUSTER, ITEM, MISS):
        assert (rows.fallback_level == level).any(), level
    x = dense_inputs(rows, "solaris_fallback")
    assert (x[rows.fallback_level == MISS, 2:2 + fm.dim] == 0).all()
    onehot = x[:, 2 + fm.dim:]
    assert onehot.shape[1] == 4 and (onehot.sum(1) == 1).all()
    for k in np.flatnonzero(rows.fallback_level == CLUSTER)[:10]:
        rep = int(REPRESENTATIVES[int(rows.items[k]) % 3])
        expected = _fm_before_start(fm, table, int(rows.users[k]), [rep])[0]
        np.testing.assert_allclose(rows.fallback_emb[k], expected, rtol=0, atol=2e-3)
    np.testing.assert_array_equal(rows.fallback_emb[precomputed], rows.exact_emb[precomputed])


def test_item_level_is_the_fm_with_an_empty_history(setup):
    fm, _, _, _, rows = setup
    prior = np.flatnonzero(rows.fallback_level == ITEM)
    empty = History.of([], [], [])
    for k in prior[:10]:
        expected = fm.embed_user(empty, [int(rows.items[k])], START).astype("<f2")
        np.testing.assert_allclose(rows.fallback_emb[k], expected[0].astype(np.float32),
                                   rtol=0, atol=2e-3)
    same_item = rows.items[prior] == rows.items[prior[0]]
    assert (rows.fallback_emb[prior][same_item] == rows.fallback_emb[prior[0]]).all()
