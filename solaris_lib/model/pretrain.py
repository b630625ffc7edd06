"""Item embeddings pretrained on co-engagement: items one user engages with close in time.

Clicks are rare and a click model learns item identity slowly, and memorises its labels when
it trains item rows on them for more than an epoch or two. Engagement sessions carry the item
structure far more densely: two items clicked by one user within ``window`` of each other are
related (the same taste, the same burst of interest). This is the session co-occurrence
signal of item2vec and of Airbnb's listing embeddings.

``engagement_pairs`` lists every (item, later item) of one user within ``window`` and at most
``neighbors`` engagements apart; engagements are clicks, or every event for logs without
clicks. ``pretrain_items`` fits a hashed item table (the network's own layout) with a
symmetric in-batch InfoNCE loss on the cosine of the two rows (``temperature``), Adam.
Only events strictly before ``before_us`` are read: the table never sees the evaluation period,
and the rows of items it never saw are zero.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from solaris_lib.model.config import FoundationConfig
from solaris_lib.model.examples import CLICK_UNKNOWN, CLICK_YES, EventLists

log = logging.getLogger(__name__)


def engagement_pairs(events: EventLists, before_us: int, window_s: float,
                     neighbors: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) (P,) int64 item ids: engagement ``a`` of a user followed by ``b`` within
    ``window_s`` seconds and ``neighbors`` engagements, both before ``before_us``."""
    users = np.repeat(events.users, np.diff(events.offsets))
    known = events.clicks != CLICK_UNKNOWN
    engaged = (events.clicks == CLICK_YES) if known.any() else np.ones(len(users), bool)
    keep = engaged & (events.ts_us < before_us)
    u, items, ts = users[keep], events.items[keep], events.ts_us[keep]
    firsts, seconds = [], []
    for lag in range(1, neighbors + 1):
        close = (u[lag:] == u[:-lag]) & (ts[lag:] - ts[:-lag] <= window_s * 1e6)
        close &= items[lag:] != items[:-lag]
        firsts.append(items[:-lag][close])
        seconds.append(items[lag:][close])
    if not firsts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(firsts), np.concatenate(seconds)


def pretrain_items(cfg: FoundationConfig, events: EventLists, before_us: int, device="cpu"):
    """The network's item table rows (item_buckets, d_model) float32 tensor, pretrained on the
    engagement pairs before ``before_us``; None when there are too few pairs to learn from."""
    import torch

    from solaris_lib.model.network import HashedTable

    a, b = engagement_pairs(events, before_us, cfg.pretrain_window_s, cfg.pretrain_neighbors)
    if len(a) < cfg.pretrain_batch:
        log.warning("item pretraining skipped: %d engagement pairs, fewer than one batch", len(a))
        return None
    torch.manual_seed(cfg.seed)
    table = HashedTable(cfg.item_buckets, cfg.d_model, cfg.item_hashes, std=0.1).to(device)
    opt = torch.optim.Adam(table.parameters(), lr=cfg.pretrain_lr)
    first, second = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
    rng = np.random.default_rng(cfg.seed)
    started = time.perf_counter()
    for epoch in range(1, cfg.pretrain_epochs + 1):
        loss = _pretrain_epoch(table, opt, first, second, rng, cfg)
        log.info("item pretraining epoch %d/%d: %d pairs, InfoNCE %.4f, %.1f s", epoch,
                 cfg.pretrain_epochs, len(a), loss, time.perf_counter() - started)
    return _unseen_rows_zeroed(table, np.concatenate([a, b]))


def _unseen_rows_zeroed(table, items: np.ndarray):
    """The table's weights with every row no pretrained item hashes to set to zero: an item
    first seen later (a new campaign) reads the zero "unknown item" vector the network learns
    to treat as such during training, never a random initial row it cannot interpret."""
    import torch

    from solaris_lib.model.network import hash_items

    weight = table.table.weight.detach().cpu().clone()
    rows = hash_items(torch.from_numpy(np.unique(items)), table.buckets, table.hashes)
    seen = torch.zeros(len(weight), dtype=torch.bool)
    seen[rows.flatten()] = True
    weight[~seen] = 0.0
    return weight


def _pretrain_epoch(table, opt, first, second, rng, cfg: FoundationConfig) -> float:
    """One pass over the pairs in shuffled batches; returns the mean loss."""
    import torch
    from torch.nn import functional

    order = torch.from_numpy(rng.permutation(len(first))).to(first.device)
    total, seen = 0.0, 0
    for start in range(0, len(order) - cfg.pretrain_batch + 1, cfg.pretrain_batch):
        sel = order[start:start + cfg.pretrain_batch]
        x = functional.normalize(table(first[sel]), dim=-1)
        y = functional.normalize(table(second[sel]), dim=-1)
        logits = x @ y.T / cfg.pretrain_temperature  # (batch, batch): the diagonal matches
        target = torch.arange(len(sel), device=logits.device)
        loss = (functional.cross_entropy(logits, target)
                + functional.cross_entropy(logits.T, target)) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
        total, seen = total + loss.item() * len(sel), seen + len(sel)
    return total / max(seen, 1)
