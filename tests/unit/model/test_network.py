"""The shared-history path equals the per-pair path; padding, empty histories, unknown items."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from solaris_lib.model.config import FoundationConfig  # noqa: E402
from solaris_lib.model.contract import naive_embed  # noqa: E402
from solaris_lib.model.network import (  # noqa: E402
    MATCH_HALF_LIVES_S,
    FoundationNet,
    exact_matches,
    gap_bucket,
    hash_items,
    match_weights,
)


def _net(preset: str = "test", **overrides) -> FoundationNet:
    torch.manual_seed(0)
    return FoundationNet(FoundationConfig.preset(preset, **overrides)).eval()


def _inputs(b: int, length: int, t: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    items = torch.randint(0, 10**12, (b, length), generator=g)
    clicks = torch.randint(0, 3, (b, length), generator=g)
    gaps = torch.rand(b, length, generator=g) * 86400 * 3
    mask = torch.rand(b, length, generator=g) > 0.3
    mask[0] = False  # an empty history
    mask[1] = True  # a full one
    targets = torch.randint(0, 10**12, (b, t), generator=g)  # never-seen ids
    return items, clicks, gaps, mask, targets


@pytest.mark.parametrize("preset", ["test", "small"])
def test_shared_equals_naive(preset):
    net = _net(preset, dropout=0.0)
    args = _inputs(5, 12, 7)
    with torch.inference_mode():
        emb, logit = net(*args)
        emb_n, logit_n = naive_embed(net, *args, chunk=9)
    assert emb.shape == (5, 7, net.cfg.dim) and logit.shape == (5, 7)
    assert torch.isfinite(emb).all() and torch.isfinite(logit).all()
    assert (emb - emb_n).abs().max().item() <= 1e-5
    assert (logit - logit_n).abs().max().item() <= 1e-5


def test_exact_matches_against_a_hand_count():
    """Per target: events and clicks of the same item, plain and decayed 2 ** (-gap / h);
    an empty slot holding the target's id adds nothing."""
    items = torch.tensor([[5, 7, 5, 9, 5]])
    clicks = torch.tensor([[0, 1, 1, 0, 1]])
    gaps = torch.tensor([[3600.0, 7200.0, 86400.0, 60.0, 10.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    targets = torch.tensor([[5, 7, 9, 11]])
    got = torch.expm1(exact_matches(targets, items, match_weights(gaps, clicks, mask)))[0]
    for t, target in enumerate(targets[0].tolist()):
        events = [j for j in range(4) if items[0, j] == target]
        taken = [events, [j for j in events if clicks[0, j] == 1]]
        want = [w for js in taken for w in
                [len(js)] + [sum(2 ** (-gaps[0, j].item() / h) for j in js)
                             for h in MATCH_HALF_LIVES_S]]
        assert got[t].tolist() == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_shared_equals_naive_when_targets_repeat_the_history():
    net = _net(dropout=0.0)
    items, clicks, gaps, mask, _ = _inputs(4, 10, 3)
    targets = torch.cat([items[:, :4], torch.tensor([[1], [2], [3], [4]])], 1)
    with torch.inference_mode():
        emb, logit = net(items, clicks, gaps, mask, targets)
        emb_n, logit_n = naive_embed(net, items, clicks, gaps, mask, targets, chunk=5)
        unmatched, _ = net(items, clicks, gaps, torch.zeros_like(mask), targets)
    assert (emb - emb_n).abs().max().item() <= 1e-5
    assert (logit - logit_n).abs().max().item() <= 1e-5
    assert not torch.allclose(emb, unmatched)


def test_padded_slots_do_not_matter():
    net = _net()
    items, clicks, gaps, mask, targets = _inputs(4, 10, 3)
    with torch.inference_mode():
        emb, _ = net(items, clicks, gaps, mask, targets)
        garbage = torch.randint(0, 10**6, items.shape)
        emb2, _ = net(torch.where(mask, items, garbage), torch.where(mask, clicks, 1),
                      torch.where(mask, gaps, 5.0), mask, targets)
    assert torch.allclose(emb, emb2, atol=1e-6)


def test_layout_and_length_do_not_matter():
    """Left- or right-aligned, or with extra padding slots: same events, same embeddings."""
    net = _net()
    items = torch.tensor([[11, 12, 13, 0, 0]])
    clicks = torch.tensor([[1, 0, 2, 0, 0]])
    gaps = torch.tensor([[900.0, 600.0, 60.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False, False]])
    targets = torch.tensor([[5, 99]])
    right = [torch.roll(x, 2, dims=1) for x in (items, clicks, gaps, mask)]
    with torch.inference_mode():
        a, _ = net(items, clicks, gaps, mask, targets)
        b, _ = net(*right, targets)
        c, _ = net(items[:, :3], clicks[:, :3], gaps[:, :3], mask[:, :3], targets)
    assert torch.allclose(a, b, atol=1e-6) and torch.allclose(a, c, atol=1e-6)


def test_history_changes_the_embedding():
    net = _net()
    items, clicks, gaps, mask, targets = _inputs(2, 8, 2)
    with torch.inference_mode():
        full, _ = net(items, clicks, gaps, torch.ones_like(mask), targets)
        empty, _ = net(items, clicks, gaps, torch.zeros_like(mask), targets)
    assert (full - empty).abs().max().item() > 1e-4


def test_hash_items_range_and_determinism():
    ids = torch.tensor([0, 1, 2, 10**15, 2**62])
    rows = hash_items(ids, 1000, 2)
    assert rows.shape == (5, 2) and rows.min() >= 0 and rows.max() < 1000
    assert torch.equal(rows, hash_items(ids.clone(), 1000, 2))
    assert len({tuple(r) for r in hash_items(torch.arange(500), 1 << 16, 2).tolist()}) == 500


def test_gap_buckets_are_log_minutes():
    gaps = torch.tensor([0.0, 59.0, 60.0, 180.0, 3600.0, -5.0, 1e12])
    expected = [0, 0, 1, 2, 5, 0, 7]  # floor(log2(1 + minutes)), clipped to 8 buckets
    assert gap_bucket(gaps, 8).tolist() == expected
    quarter = [0, 3, 4, 8, 23, 0, 63]  # floor(4 log2(1 + minutes)), clipped to 64 buckets
    assert gap_bucket(gaps, 64, per_octave=4).tolist() == quarter
