"""Artefacts reload to identical embeddings; the serving API's batch, single and naive paths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from solaris_lib.model import artefact  # noqa: E402
from solaris_lib.model.config import FoundationConfig  # noqa: E402
from solaris_lib.model.examples import EventLists  # noqa: E402
from solaris_lib.model.network import FoundationNet  # noqa: E402
from solaris_lib.model.online import FoundationEmbedder, History  # noqa: E402

ASOF = datetime(2026, 1, 8, tzinfo=UTC)


@pytest.fixture
def embedder():
    torch.manual_seed(3)
    return FoundationEmbedder(FoundationNet(FoundationConfig.preset("test")), "v-test", "cpu")


def _events(seed: int = 0) -> EventLists:
    rng = np.random.default_rng(seed)
    n = 200
    asof_us = int(ASOF.timestamp() * 1e6)
    return EventLists.from_events(rng.integers(0, 8, n), rng.integers(0, 50, n),
                                  asof_us - rng.integers(1, 10**11, n), rng.integers(0, 3, n))


def test_batch_equals_naive_and_single_user(embedder):
    events = _events()
    users = np.array([0, 3, 99, 5])  # 99 has no events
    counts = np.array([4, 1, 3, 0])
    items = np.arange(8, dtype=np.int64) * 1_000_003
    emb, logits = embedder.score_users(events, users, counts, items, ASOF)
    emb_n, logits_n = embedder.score_users(events, users, counts, items, ASOF, naive=True)
    assert emb.shape == (8, embedder.dim) and emb.dtype == np.float32 and logits.shape == (8,)
    assert np.abs(emb - emb_n).max() <= 1e-5 and np.abs(logits - logits_n).max() <= 1e-5
    lo, hi = events.bounds(np.array([3]))
    single = History(events.items[lo[0]:hi[0]], events.ts_us[lo[0]:hi[0]],
                     events.clicks[lo[0]:hi[0]])
    assert np.allclose(embedder.embed_user(single, items[4:5], ASOF), emb[4:5], atol=1e-6)
    empty = embedder.embed_user(History.empty(), items[5:8], ASOF)
    assert np.allclose(empty, emb[5:8], atol=1e-6)
    embedder.max_pairs_per_pass = 3  # one or two users per pass, sorted by item count
    emb_p, logits_p = embedder.score_users(events, users, counts, items, ASOF)
    assert np.allclose(emb_p, emb, atol=1e-6) and np.allclose(logits_p, logits, atol=1e-6)
    none, _ = embedder.score_users(events, users[:2], np.array([0, 0]), items[:0], ASOF)
    assert none.shape == (0, embedder.dim)


def test_only_events_before_asof_count(embedder):
    h = History.of([1, 2, 3], [ASOF - timedelta(hours=2), ASOF - timedelta(hours=1), ASOF],
                   [True, None, False])
    earlier = History.of([1, 2], [ASOF - timedelta(hours=2), ASOF - timedelta(hours=1)],
                         [True, None])
    assert np.array_equal(embedder.embed_user(h, [7, 8], ASOF),
                          embedder.embed_user(earlier, [7, 8], ASOF))


def test_artefact_roundtrip_gives_identical_embeddings(tmp_path, embedder):
    root = str(tmp_path / "foundation")
    state = embedder.net.state_dict()
    digest = artefact.weights_digest(state, embedder.cfg)
    folder = artefact.write_version(root, f"20260105T000000Z-{digest}", state, embedder.cfg,
                                    {"foundation": {"log_loss": 0.3}}, {"start": "x"})
    assert artefact.serving_version(root) is None
    with pytest.raises(artefact.ModelNotFoundError):
        FoundationEmbedder.load(root)
    artefact.set_serving(root, f"20260105T000000Z-{digest}")
    events, users = _events(1), np.array([0, 1, 2])
    items = np.arange(9, dtype=np.int64)
    want, _ = embedder.score_users(events, users, np.array([3, 3, 3]), items, ASOF)
    for path in (root, folder):
        loaded = FoundationEmbedder.load(path, "cpu")
        assert loaded.version == f"20260105T000000Z-{digest}"
        got, _ = loaded.score_users(events, users, np.array([3, 3, 3]), items, ASOF)
        assert np.array_equal(got, want)
    assert artefact.weights_digest(artefact.load_state(folder)[1], embedder.cfg) == digest
    [info] = artefact.list_versions(root)
    assert info.metrics["foundation"]["log_loss"] == 0.3
