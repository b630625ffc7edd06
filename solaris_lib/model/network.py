"""The foundation network: a history encoder run once per user, targets that attend to it.

Shapes: ``B`` users (or requests), ``L`` history slots, ``T`` targets per user, ``d`` =
``config.d_model``, ``D`` = ``config.dim`` (the interaction embedding, 64 by default).

Inputs of a history (oldest first; valid slots need not be contiguous, ``mask`` says which):

* ``items``  (B, L) int64   raw item ids (hashed inside, so unknown items work)
* ``clicks`` (B, L) int64   0 = not clicked, 1 = clicked, 2 = unknown
* ``gaps``   (B, L) float32 seconds between the event and the scoring time (>= 0)
* ``mask``   (B, L) bool    True where the slot holds an event

A learned "no history" token is prepended to every history, so an empty history (all of
``mask`` False) still gives every target something to attend to.

``encode_history`` runs the transformer encoder once per user: cost O(B L d^2 layers).
``interact`` lets each of the T targets attend to the encoded history: O(B T L d), the
history's keys and values projected once per user. The naive path (:func:`naive_interact`)
re-encodes the history for every (user, target) pair, as a model that scores pairs one by one
would; both give the same numbers (up to float rounding).
"""

from __future__ import annotations

import torch
from torch import nn

from solaris_lib.model.config import FoundationConfig

CLICK_NO, CLICK_YES, CLICK_UNKNOWN = 0, 1, 2
_HASH_MULTIPLIERS = (0x1E3779B97F4A7C15, 0x3C6EF372FE94F82B, 0x5A4ED4A5F2B0C3B1, 0x7F4A7C159E3779B9)
_HASH_MIX = 0x2545F4914F6CDD1D


def hash_items(items: torch.Tensor, buckets: int, hashes: int) -> torch.Tensor:
    """(…, hashes) int64 rows in ``[0, buckets)`` of the item table for raw ids (…) int64.

    A multiply-xorshift-multiply hash in wrapping int64 arithmetic: the same on CPU and CUDA.
    """
    rows = []
    for k in range(hashes):
        x = items * _HASH_MULTIPLIERS[k % len(_HASH_MULTIPLIERS)] + k
        x = x ^ (x >> 29)
        x = x * _HASH_MIX
        x = x ^ (x >> 32)
        rows.append(torch.remainder(x, buckets))
    return torch.stack(rows, dim=-1)


def gap_bucket(gaps: torch.Tensor, buckets: int) -> torch.Tensor:
    """(…) int64 bucket ``floor(log2(1 + minutes))`` clipped to ``[0, buckets)`` of gaps (…) s."""
    minutes = torch.clamp(gaps.float(), min=0.0) / 60.0
    return torch.clamp(torch.floor(torch.log2(1.0 + minutes)), 0, buckets - 1).long()


class CrossBlock(nn.Module):
    """Pre-norm block: targets (B, T, d) attend to the encoded history (B, L+1, d), then FFN."""

    def __init__(self, cfg: FoundationConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.norm_q = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, cfg.heads, dropout=cfg.dropout, batch_first=True)
        self.norm_ff = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, cfg.ffn_mult * d), nn.GELU(),
                                nn.Linear(cfg.ffn_mult * d, d), nn.Dropout(cfg.dropout))

    def forward(self, q: torch.Tensor, h: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """q (B, T, d), h (B, L+1, d), pad (B, L+1) True where ignored -> (B, T, d)."""
        attended, _ = self.attn(self.norm_q(q), h, h, key_padding_mask=pad, need_weights=False)
        q = q + attended
        return q + self.ff(self.norm_ff(q))


class FoundationNet(nn.Module):
    """Target-aware sequence model producing (B, T, D) interaction embeddings and (B, T) logits."""

    def __init__(self, cfg: FoundationConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.item_table = nn.Embedding(cfg.item_buckets, d)
        self.click_emb = nn.Embedding(3, d)
        self.gap_emb = nn.Embedding(cfg.gap_buckets, d)
        self.pos_emb = nn.Embedding(cfg.max_history, d)
        self.no_history = nn.Parameter(torch.zeros(1, 1, d))
        self.target_type = nn.Parameter(torch.zeros(d))
        self.encoder = self._encoder(cfg)
        self.enc_norm = nn.LayerNorm(d)
        self.cross = nn.ModuleList(CrossBlock(cfg) for _ in range(cfg.cross_layers))
        self.head = nn.Sequential(nn.LayerNorm(3 * d), nn.Linear(3 * d, 2 * d), nn.GELU(),
                                  nn.Linear(2 * d, cfg.dim))
        self.out = nn.Linear(cfg.dim, 1)
        nn.init.normal_(self.item_table.weight, std=0.02)
        nn.init.normal_(self.no_history, std=0.02)

    @staticmethod
    def _encoder(cfg: FoundationConfig) -> nn.Module:
        if cfg.layers == 0:
            return nn.Identity()
        layer = nn.TransformerEncoderLayer(
            cfg.d_model, cfg.heads, cfg.ffn_mult * cfg.d_model, cfg.dropout,
            activation="gelu", batch_first=True, norm_first=True)
        return nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)

    def embed_items(self, items: torch.Tensor) -> torch.Tensor:
        """(…) int64 raw ids -> (…, d): the sum of the item's hashed rows."""
        rows = hash_items(items, self.cfg.item_buckets, self.cfg.item_hashes)
        return self.item_table(rows).sum(dim=-2)

    def encode_history(self, items, clicks, gaps, mask) -> torch.Tensor:
        """(B, L) histories -> H (B, L+1, d); slot 0 is the "no history" token.

        ``L`` may be anything up to ``cfg.max_history`` (positions count back from the newest
        valid event). Slots where ``mask`` is False hold values nobody attends to.
        """
        mask = mask.bool()
        newer = mask.flip(1).long().cumsum(1).flip(1) - mask.long()  # (B, L) valid events after
        pos = torch.clamp(newer, max=self.cfg.max_history - 1)
        x = (self.embed_items(items) + self.click_emb(clicks.long())
             + self.gap_emb(gap_bucket(gaps, self.cfg.gap_buckets)) + self.pos_emb(pos))
        x = torch.cat([self.no_history.expand(x.shape[0], 1, -1).to(x.dtype), x], dim=1)
        h = self.encoder(x, src_key_padding_mask=self.padding(mask)) if self.cfg.layers else x
        return self.enc_norm(h)

    @staticmethod
    def padding(mask: torch.Tensor) -> torch.Tensor:
        """(B, L) valid-event mask -> (B, L+1) key padding mask (True = ignore)."""
        keep = torch.cat([torch.ones_like(mask[:, :1], dtype=torch.bool), mask.bool()], dim=1)
        return ~keep

    def interact(self, h, mask, targets) -> tuple[torch.Tensor, torch.Tensor]:
        """H (B, L+1, d), mask (B, L), targets (B, T) int64 -> (emb (B, T, D), logit (B, T))."""
        t = self.embed_items(targets) + self.target_type
        q, pad = t, self.padding(mask)
        for block in self.cross:
            q = block(q, h, pad)
        emb = self.head(torch.cat([q, t, q * t], dim=-1))
        return emb, self.out(emb).squeeze(-1)

    def forward(self, items, clicks, gaps, mask, targets):
        """Shared-history path: encode each history once, score all its targets."""
        return self.interact(self.encode_history(items, clicks, gaps, mask), mask, targets)


def naive_interact(net: FoundationNet, items, clicks, gaps, mask, targets, chunk: int = 4096):
    """The per-pair reference: re-encode the history for each of the B*T pairs.

    Same inputs and outputs as :meth:`FoundationNet.forward`; ``chunk`` pairs at a time.
    """
    b, t = targets.shape
    idx = torch.arange(b, device=targets.device).repeat_interleave(t)  # (B*T,) user of each pair
    flat = targets.reshape(-1, 1)
    embs, logits = [], []
    for start in range(0, b * t, chunk):
        sel = idx[start:start + chunk]
        emb, logit = net(items[sel], clicks[sel], gaps[sel], mask[sel], flat[start:start + chunk])
        embs.append(emb[:, 0])
        logits.append(logit[:, 0])
    if not embs:
        return targets.new_zeros((b, t, net.cfg.dim), dtype=torch.float32), targets.new_zeros(
            (b, t), dtype=torch.float32)
    return torch.cat(embs).reshape(b, t, -1), torch.cat(logits).reshape(b, t)
