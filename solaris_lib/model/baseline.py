"""The ID-only baseline: a factorisation model on hashed user and item ids (torch).

``logit = b + b_user + b_item + <e_user, e_item>``: logistic regression on the two ids plus
their low-rank interaction. It sees the same labelled pairs as the foundation model but no
history, so the gap between the two is what the sequence model adds.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
from torch import nn

from solaris_lib.model.network import hash_items

log = logging.getLogger(__name__)


class IdBaseline(nn.Module):
    """(B,) user ids, (B,) item ids (int64, hashed into ``buckets`` rows) -> (B,) logits."""

    def __init__(self, buckets: int = 1 << 16, rank: int = 16) -> None:
        super().__init__()
        self.buckets = buckets
        self.users = nn.Embedding(buckets, rank + 1)  # last column: the bias
        self.items = nn.Embedding(buckets, rank + 1)
        self.bias = nn.Parameter(torch.zeros(1))
        nn.init.normal_(self.users.weight, std=0.01)
        nn.init.normal_(self.items.weight, std=0.01)

    def rows(self, users: torch.Tensor, items: torch.Tensor):
        u = self.users(hash_items(users, self.buckets, 1)[..., 0])
        i = self.items(hash_items(items, self.buckets, 1)[..., 0])
        return u, i

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u, i = self.rows(users, items)
        return self.bias + u[:, -1] + i[:, -1] + (u[:, :-1] * i[:, :-1]).sum(-1)


L2_GRID = (1e-4, 1e-3, 1e-2)
MAX_EPOCHS = 6


def train_baseline(users: np.ndarray, items: np.ndarray, labels: np.ndarray, *, seed: int,
                   batch: int = 2048, validation: float = 0.1) -> IdBaseline:
    """Fit :class:`IdBaseline` on (n,) pairs (in time order) with Adam and an L2 penalty on the
    rows used. The L2 weight and the epoch count are chosen on the last ``validation`` share of
    the pairs (early stopping), then the model is refit on all pairs with that choice: the
    baseline gets the same care a practitioner would give it."""
    cut = int(len(users) * (1 - validation))
    started = time.perf_counter()
    best = (np.inf, L2_GRID[0], 1)
    for l2 in L2_GRID:
        model = _new_model(seed, labels[:cut])
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        for epoch in range(1, MAX_EPOCHS + 1):
            _epoch(model, opt, users[:cut], items[:cut], labels[:cut], seed + epoch, batch, l2)
            loss = _loss(model, users[cut:], items[cut:], labels[cut:])
            if loss < best[0]:
                best = (loss, l2, epoch)
    _, l2, epochs = best
    model = _new_model(seed, labels)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for epoch in range(1, epochs + 1):
        _epoch(model, opt, users, items, labels, seed + epoch, batch, l2)
    elapsed = time.perf_counter() - started
    log.info("ID-only baseline: %d pairs, chose l2=%g and %d epochs (validation log-loss %.5f) "
             "in %.1f s", len(users), l2, epochs, best[0], elapsed)
    return model.eval()


def _new_model(seed: int, labels: np.ndarray) -> IdBaseline:
    torch.manual_seed(seed)
    model = IdBaseline()
    ctr = float(np.clip(labels.mean() if len(labels) else 0.5, 1e-4, 1 - 1e-4))
    with torch.no_grad():
        model.bias.fill_(float(np.log(ctr / (1 - ctr))))
    return model


def _epoch(model, opt, users, items, labels, seed, batch, l2) -> None:
    model.train()
    order = np.random.default_rng(seed).permutation(len(users))
    u_all, i_all = torch.from_numpy(users), torch.from_numpy(items)
    y_all = torch.from_numpy(labels.astype(np.float32))
    for start in range(0, len(users), batch):
        sel = torch.from_numpy(order[start:start + batch])
        u, i = model.rows(u_all[sel], i_all[sel])
        logits = model.bias + u[:, -1] + i[:, -1] + (u[:, :-1] * i[:, :-1]).sum(-1)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y_all[sel])
        loss = loss + l2 * (u.pow(2).sum(-1) + i.pow(2).sum(-1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _loss(model, users, items, labels) -> float:
    from solaris_lib.evaluation.metrics import log_loss_from_logits

    return log_loss_from_logits(labels, predict_baseline(model.eval(), users, items))


def predict_baseline(model: IdBaseline, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """(n,) float64 logits."""
    with torch.inference_mode():
        return model(torch.from_numpy(users), torch.from_numpy(items)).double().numpy()
