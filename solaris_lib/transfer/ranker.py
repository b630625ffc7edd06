"""The small online ranker and its variants, all trained on the same rows (torch).

``logit = b + b_u + b_i + <e_u, e_i> + MLP([e_u, e_i, x]) + w . x`` with hashed user and item
rows ``e`` (``id_dim`` + a bias column each) and dense serving-time inputs ``x`` (standardised
on the training rows):

====================== ====================================================================
plain                  log1p(activity), log1p(popularity)
distilled              the same inputs; target ``w * sigmoid(FM logit) + (1 - w) * click``
solaris                + the cached interaction embedding (D) and the hit flag (zeros on a miss)
solaris_hit_only       + the hit flag alone (the ablation: what speculation's choice carries)
solaris_embedding_only + the cached embedding alone (zeros on a miss), no flag
solaris_fallback       + the exact, cluster- or item-level embedding (D) and the level one-hot (4)
====================== ====================================================================

Training: Adam (SparseAdam for the id tables: a step touches only its batch's rows), seeded; the epoch count is chosen on the newest ``validation`` share of the
training rows (log-loss against the click labels), then the model is refit on all of them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from solaris_lib.evaluation import metrics
from solaris_lib.fallback import Level
from solaris_lib.transfer.config import RankerConfig
from solaris_lib.transfer.features import RankerRows

log = logging.getLogger(__name__)


def dense_inputs(rows: RankerRows, variant: str) -> np.ndarray:
    """(N, F) float32 dense inputs of ``variant`` (before standardisation)."""
    base = [np.log1p(rows.activity), np.log1p(rows.popularity)]
    cols = [np.stack(base, axis=1).astype(np.float32)]
    hit = (rows.exact_level == Level.EXACT).astype(np.float32)[:, None]
    if variant == "solaris":
        cols += [rows.exact_emb, hit]
    elif variant == "solaris_hit_only":
        cols += [hit]
    elif variant == "solaris_embedding_only":
        cols += [rows.exact_emb]
    elif variant == "solaris_fallback":
        onehot = np.stack([rows.fallback_level == lv for lv in (Level.EXACT, Level.CLUSTER,
                                                                Level.ITEM, Level.MISS)], axis=1)
        cols += [rows.fallback_emb, onehot.astype(np.float32)]
    elif variant not in ("plain", "distilled"):
        raise ValueError(f"unknown ranker variant {variant!r}")
    return np.concatenate(cols, axis=1).astype(np.float32)


def targets(rows: RankerRows, variant: str, cfg: RankerConfig) -> np.ndarray:
    """(N,) float32 training targets: click labels, or the distillation mix."""
    if variant != "distilled":
        return rows.labels.astype(np.float32)
    teacher = metrics.sigmoid(rows.fm_logit)
    w = cfg.distill_weight
    return (w * teacher + (1 - w) * rows.labels).astype(np.float32)


def _network(cfg: RankerConfig, n_dense: int):
    import torch
    from torch import nn

    from solaris_lib.model.network import hash_items

    class SmallRanker(nn.Module):
        """(B,) user ids, (B,) item ids, (B, F) dense -> (B,) logits."""

        def __init__(self) -> None:
            super().__init__()
            self.users = nn.Embedding(cfg.buckets, cfg.id_dim + 1, sparse=True)
            self.items = nn.Embedding(cfg.buckets, cfg.id_dim + 1, sparse=True)
            nn.init.normal_(self.users.weight, std=0.01)
            nn.init.normal_(self.items.weight, std=0.01)
            self.mlp = nn.Sequential(nn.Linear(2 * cfg.id_dim + n_dense, cfg.hidden), nn.ReLU(),
                                     nn.Linear(cfg.hidden, 1))
            self.linear = nn.Linear(n_dense, 1)
            self.register_buffer("mean", torch.zeros(n_dense))
            self.register_buffer("std", torch.ones(n_dense))

        def rows(self, users, items):
            u = self.users(hash_items(users, cfg.buckets, 1)[..., 0])
            i = self.items(hash_items(items, cfg.buckets, 1)[..., 0])
            return u, i

        def forward(self, users, items, dense):
            u, i = self.rows(users, items)
            x = (dense - self.mean) / self.std
            deep = self.mlp(torch.cat([u[:, :-1], i[:, :-1], x], dim=1))[:, 0]
            return (u[:, -1] + i[:, -1] + (u[:, :-1] * i[:, :-1]).sum(-1) + deep
                    + self.linear(x)[:, 0])

    return SmallRanker()


@dataclass
class TrainedRanker:
    variant: str
    net: object
    epochs: int
    validation_logloss: float
    seconds: float

    def predict(self, rows: RankerRows) -> np.ndarray:
        """(N,) float64 logits."""
        import torch

        dense = torch.from_numpy(dense_inputs(rows, self.variant))
        with torch.inference_mode():
            out = [self.net(torch.from_numpy(rows.users[s:s + 65536]),
                            torch.from_numpy(rows.items[s:s + 65536]), dense[s:s + 65536])
                   for s in range(0, len(rows), 65536)]
        return torch.cat(out).double().numpy() if out else np.zeros(0)


def _fit(cfg: RankerConfig, users, items, dense, y, epochs: int, seed: int, watch=None):
    """Train a fresh network for ``epochs``; ``watch`` = (users, items, dense, labels) scored
    after each epoch. Returns (net, [validation log-loss per epoch])."""
    import torch

    torch.manual_seed(seed)
    net = _network(cfg, dense.shape[1])
    with torch.no_grad():
        net.mean.copy_(torch.from_numpy(dense.mean(0)))
        net.std.copy_(torch.from_numpy(dense.std(0) + 1e-6))
        ctr = float(np.clip(y.mean(), 1e-4, 1 - 1e-4))
        net.mlp[-1].bias.fill_(float(np.log(ctr / (1 - ctr))))
    tables = [net.users.weight, net.items.weight]  # sparse rows: only the batch's are updated
    dense_params = [p for n, p in net.named_parameters() if not n.startswith(("users.", "items."))]
    opts = [torch.optim.SparseAdam(tables, lr=cfg.lr), torch.optim.Adam(dense_params, lr=cfg.lr)]
    t_u, t_i, t_d, t_y = (torch.from_numpy(a) for a in (users, items, dense, y))
    rng = np.random.default_rng(seed)
    history = []
    for _ in range(epochs):
        net.train()
        order = torch.from_numpy(rng.permutation(len(y)))
        for start in range(0, len(y), cfg.batch):
            sel = order[start:start + cfg.batch]
            logits = net(t_u[sel], t_i[sel], t_d[sel])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, t_y[sel])
            u, i = net.rows(t_u[sel], t_i[sel])
            loss = loss + cfg.l2 * (u.pow(2).sum(-1) + i.pow(2).sum(-1)).mean()
            for opt in opts:
                opt.zero_grad()
            loss.backward()
            for opt in opts:
                opt.step()
        if watch is not None:
            net.eval()
            with torch.inference_mode():
                z = net(*(torch.from_numpy(a) for a in watch[:3])).double().numpy()
            history.append(metrics.log_loss_from_logits(watch[3], z))
    return net.eval(), history


def train_ranker(rows: RankerRows, variant: str, cfg: RankerConfig) -> TrainedRanker:
    """Fit ``variant`` on ``rows`` (time-ordered): choose epochs on the newest share, refit."""
    started = time.perf_counter()
    order = np.argsort(rows.ts_us, kind="stable")
    rows = rows.take(order)
    dense, y = dense_inputs(rows, variant), targets(rows, variant, cfg)
    cut = int(len(rows) * (1 - cfg.validation))
    head = (rows.users[:cut], rows.items[:cut], dense[:cut], y[:cut])
    watch = (rows.users[cut:], rows.items[cut:], dense[cut:], rows.labels[cut:])
    _, history = _fit(cfg, *head, cfg.epochs, cfg.seed, watch)
    epochs = int(np.nanargmin(history)) + 1
    net, _ = _fit(cfg, rows.users, rows.items, dense, y, epochs, cfg.seed)
    seconds = time.perf_counter() - started
    log.info("ranker %s: %d rows, %d inputs, %d epochs (validation log-loss %.5f) in %.1f s",
             variant, len(rows), dense.shape[1], epochs, history[epochs - 1], seconds)
    return TrainedRanker(variant, net, epochs, float(history[epochs - 1]), seconds)
