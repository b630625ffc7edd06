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


def train_baseline(users: np.ndarray, items: np.ndarray, labels: np.ndarray, *, seed: int,
                   epochs: int = 3, batch: int = 2048, l2: float = 1e-4) -> IdBaseline:
    """Fit :class:`IdBaseline` on (n,) pairs with Adam and an L2 penalty on the rows used."""
    torch.manual_seed(seed)
    model = IdBaseline()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed)
    u_all, i_all = torch.from_numpy(users), torch.from_numpy(items)
    y_all = torch.from_numpy(labels.astype(np.float32))
    started = time.perf_counter()
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(users)))
        for start in range(0, len(users), batch):
            sel = order[start:start + batch]
            u, i = model.rows(u_all[sel], i_all[sel])
            logits = model.bias + u[:, -1] + i[:, -1] + (u[:, :-1] * i[:, :-1]).sum(-1)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, y_all[sel])
            loss = loss + l2 * (u.pow(2).sum(-1) + i.pow(2).sum(-1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    elapsed = time.perf_counter() - started
    log.info("ID-only baseline: %d pairs x %d epochs in %.1f s (%.0f pairs/s)", len(users),
             epochs, elapsed, epochs * len(users) / max(elapsed, 1e-9))
    return model.eval()


def predict_baseline(model: IdBaseline, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """(n,) float64 logits."""
    with torch.inference_mode():
        return model(torch.from_numpy(users), torch.from_numpy(items)).double().numpy()
