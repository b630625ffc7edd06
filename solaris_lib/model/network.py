"""The foundation network: a user's history encoded once, every target item read against it.

Shapes: ``B`` users (or requests), ``L`` history slots, ``T`` targets per user, ``d`` =
``config.d_model``, ``H`` = ``config.heads``, ``D`` = ``config.dim`` (the interaction embedding).

Inputs (the history oldest first; valid slots need not be contiguous, ``mask`` says which):

* ``items``  (B, L) int64   raw item ids of the history (hashed inside; unknown items work)
* ``clicks`` (B, L) int64   0 = not clicked, 1 = clicked, 2 = unknown
* ``gaps``   (B, L) float32 seconds between the event and the scoring time (>= 0)
* ``mask``   (B, L) bool    True where the slot holds an event
* ``targets`` (B, T) int64  raw item ids to score

What the network reads, and why (a recommender's signal is mostly "what did this user do with
items like this one, and how recently"):

* **Ids**: a hashed item row with a bias column, shared by history events and targets. The user
  is their history: a hashed user row memorised noise and added nothing on held-out days.
* **Pointwise target attention** (HSTU/DIN style): each target scores every history event,
  ``w = silu(q . k / sqrt(d_h) + bias[head, time bucket] + bias[head, click code])``; the
  weights are *not* normalised over the history, so the output grows with the number of
  matching recent events (intensity), and the relative-time bias lets a head forget with age.
* **Activity**: counts of events and clicks in the last 1 h, 6 h, 1 d and 7 d (from the gaps).
* **Exact matches**: how often, and how recently, the user was shown and clicked the target
  item itself (counts and time-decayed counts over the history, :data:`MATCH_HALF_LIVES_S`).
  Attention over hashed rows only approximates an exact match, and a user's own past with an
  item is the strongest single signal a click log has.

``encode_history`` runs once per user: token embeddings, the optional self-attention encoder
(``layers``) and key/value projections: O(B L d^2 layers).
``interact`` scores the T targets against it: O(B T L d). :func:`solaris_lib.model.contract.naive_embed` re-encodes
the history for every (user, target) pair, as a model that scores pairs one by one would; both
give the same numbers (up to float rounding). The interaction embedding (B, T, D) is the last
hidden layer; the logit is a linear read-out of it, so the cached vector carries the score.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from solaris_lib.model.config import FoundationConfig

CLICK_NO, CLICK_YES, CLICK_UNKNOWN = 0, 1, 2
_HASH_MULTIPLIERS = (0x1E3779B97F4A7C15, 0x3C6EF372FE94F82B, 0x5A4ED4A5F2B0C3B1, 0x7F4A7C159E3779B9)
_HASH_MIX = 0x2545F4914F6CDD1D
ACTIVITY_WINDOWS_S = (3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0)
MATCH_HALF_LIVES_S = (3600.0, 86400.0, 7 * 86400.0)
MATCH_FEATURES = 2 + 2 * len(MATCH_HALF_LIVES_S)


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


def gap_bucket(gaps: torch.Tensor, buckets: int, per_octave: int = 1) -> torch.Tensor:
    """(…) int64 bucket ``floor(per_octave * log2(1 + minutes))`` in ``[0, buckets)`` of gaps (…) s."""
    minutes = torch.clamp(gaps.float(), min=0.0) / 60.0
    return torch.clamp(torch.floor(per_octave * torch.log2(1.0 + minutes)), 0, buckets - 1).long()


def activity(gaps: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, 2W) float: log1p of the events and of the clicks in each window of
    ``ACTIVITY_WINDOWS_S``, counted from the history (B, L)."""
    feats = []
    for window in ACTIVITY_WINDOWS_S:
        inside = mask & (gaps < window)
        feats.append(inside.sum(-1))
        feats.append((inside & (clicks == CLICK_YES)).sum(-1))
    return torch.log1p(torch.stack(feats, dim=-1).float())


def match_weights(gaps: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, L, MATCH_FEATURES) float what each history event adds to an exact match: 1 and
    ``2 ** (-gap / h)`` for each half-life ``h`` of :data:`MATCH_HALF_LIVES_S`, each for every
    event and for clicks only; zero in empty slots. gaps (B, L) s, clicks and mask (B, L)."""
    valid, clicked = mask.float(), (mask & (clicks == CLICK_YES)).float()
    decays = [torch.exp2(-gaps.float() / h) for h in MATCH_HALF_LIVES_S]
    weights = [torch.ones_like(valid), *decays]
    return torch.stack([w * valid for w in weights] + [w * clicked for w in weights], -1)


def exact_matches(targets: torch.Tensor, items: torch.Tensor, weights: torch.Tensor
                  ) -> torch.Tensor:
    """(B, T, MATCH_FEATURES) ``log1p`` of the weights (B, L, F) summed over the history
    events whose item (B, L) equals the target (B, T): O(B T L F)."""
    same = (targets[:, :, None] == items[:, None, :]).to(weights.dtype)
    return torch.log1p(same @ weights)


def decay_prior(cfg: FoundationConfig) -> torch.Tensor:
    """(H, gap_buckets) initial time bias: head h forgets an event exponentially with a
    half-life spread geometrically from 1 h to 7 days over the heads (-ln 2 per half-life at
    each bucket's lower edge), so attention starts out recency-weighted at several scales."""
    minutes = (2.0 ** (torch.arange(cfg.gap_buckets) / cfg.gap_per_octave)) - 1.0
    half_lives = torch.logspace(math.log10(60.0), math.log10(7 * 1440.0), cfg.heads)
    return -math.log(2.0) * minutes[None, :] / half_lives[:, None]


class HistoryState(NamedTuple):
    """What ``encode_history`` computes once per user and ``interact`` reads per target."""

    keys: torch.Tensor  # (B, H, L, d_h)
    values: torch.Tensor  # (B, H, L, d_h)
    bias: torch.Tensor  # (B, H, L) time and click bias of each event
    log_valid: torch.Tensor  # (B, 1, 1, L) 0 where the slot holds an event, else -inf
    interest: torch.Tensor  # (B, d) the user: a target-free read of the history and activity
    items: torch.Tensor  # (B, L) int64 raw item ids of the history
    match: torch.Tensor  # (B, L, MATCH_FEATURES) what each event adds to an exact match


class HashedTable(nn.Module):
    """Raw int64 ids -> (…, width) rows: the sum of ``hashes`` rows of a ``buckets``-row table."""

    def __init__(self, buckets: int, width: int, hashes: int, std: float) -> None:
        super().__init__()
        self.buckets, self.hashes = buckets, hashes
        self.table = nn.Embedding(buckets, width)
        nn.init.normal_(self.table.weight, std=std / math.sqrt(hashes))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(hash_items(ids, self.buckets, self.hashes)).sum(dim=-2)


def _read(query: torch.Tensor, state: HistoryState) -> tuple[torch.Tensor, torch.Tensor]:
    """Exponential target attention of query (B|1, H, T, d_h) over the history: (read (B, H, T,
    d_h), intensity (B, H, T)). An empty slot 0 with score 0 is always present, so the weights
    are ``exp(score) / (1 + sum exp)`` and ``intensity = log(1 + sum_j exp(score_j))`` grows
    with the number of matching events (an empty history reads zeros at intensity 0)."""
    score = query @ state.keys.transpose(-1, -2) / math.sqrt(query.shape[-1])  # (B, H, T, L)
    score = score + state.bias[:, :, None, :] + state.log_valid
    score = torch.cat([torch.zeros_like(score[..., :1]), score], -1)
    read = torch.softmax(score, -1)[..., 1:] @ state.values
    return read, torch.logsumexp(score, -1)


class ContractNet(nn.Module):
    """What every shipped network shares: the contract's ``dim``, ``max_history`` and
    ``max_clicks`` read from ``self.cfg``, and the output bias ``self.out`` set at a base rate."""

    cfg: object
    out: nn.Linear

    @property
    def dim(self) -> int:
        return self.cfg.dim

    @property
    def max_history(self) -> int:
        return self.cfg.max_history

    @property
    def max_clicks(self) -> int:
        return self.cfg.max_clicks

    def set_base_rate(self, ctr: float) -> None:
        """Start the output bias at the logit of the training click rate."""
        ctr = min(max(ctr, 1e-4), 1 - 1e-4)
        with torch.no_grad():
            self.out.bias.fill_(math.log(ctr / (1 - ctr)))


class FoundationNet(ContractNet):
    """Target-aware sequence model producing (B, T, D) interaction embeddings and (B, T) logits.

    Implements :class:`~solaris_lib.model.contract.InteractionModel`: ``encode`` is
    :meth:`encode_history`, ``embed`` is :meth:`interact`; ``version`` is set by the loader."""

    version = "unversioned"

    def __init__(self, cfg: FoundationConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, heads = cfg.d_model, cfg.heads
        # zero rows: an item training never saw reads the zero "unknown item" vector
        self.items = HashedTable(cfg.item_buckets, d, cfg.item_hashes, std=0.0)
        self.item_bias = HashedTable(cfg.item_buckets, 1, cfg.item_hashes, std=0.0)
        self.click_emb = nn.Embedding(3, d)
        self.gap_emb = nn.Embedding(cfg.gap_buckets, d)
        for table in (self.click_emb, self.gap_emb):
            nn.init.normal_(table.weight, std=0.1)
        self.encoder = self._encoder(cfg)
        self.kv = nn.Linear(d, 2 * d)
        self.query = nn.Linear(d, d)
        self.time_bias = nn.Parameter(decay_prior(cfg))
        self.click_bias = nn.Parameter(torch.zeros(heads, 3))
        self.interest_query = nn.Parameter(torch.zeros(1, heads, 1, d // heads))
        self.activity = nn.Linear(2 * len(ACTIVITY_WINDOWS_S), d)
        self.interest = nn.Sequential(nn.LayerNorm(2 * d), nn.Linear(2 * d, d))
        self.attn_out = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))
        width = 4 * d + heads + 1 + MATCH_FEATURES
        self.head = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, cfg.ffn_mult * d), nn.GELU(),
            nn.Dropout(cfg.dropout), nn.Linear(cfg.ffn_mult * d, cfg.dim), nn.GELU())
        self.out = nn.Linear(cfg.dim, 1)

    @staticmethod
    def _encoder(cfg: FoundationConfig) -> nn.Module | None:
        if cfg.layers == 0:
            return None
        layer = nn.TransformerEncoderLayer(
            cfg.d_model, cfg.heads, cfg.ffn_mult * cfg.d_model, cfg.dropout,
            activation="gelu", batch_first=True, norm_first=True)
        return nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d) -> (B, H, L, d_h)."""
        b, n, _ = x.shape
        return x.view(b, n, self.cfg.heads, -1).transpose(1, 2)

    def encode_history(self, items, clicks, gaps, mask) -> HistoryState:
        """(B, L) histories -> the :class:`HistoryState` every target reads."""
        mask, clicks = mask.bool(), clicks.long()
        buckets = gap_bucket(gaps, self.cfg.gap_buckets, self.cfg.gap_per_octave)
        x = self.items(items) + self.click_emb(clicks) + self.gap_emb(buckets)
        if self.encoder is not None:
            x = self.encoder(x, src_key_padding_mask=~mask)
            x = torch.where(mask[..., None], x, torch.zeros_like(x))
        keys, values = self.kv(x).chunk(2, dim=-1)
        bias = (self.time_bias[:, buckets] + self.click_bias[:, clicks]).permute(1, 0, 2)
        log_valid = torch.zeros_like(mask, dtype=keys.dtype).masked_fill(~mask, float("-inf"))
        state = HistoryState(self._split_heads(keys), self._split_heads(values), bias,
                             log_valid[:, None, None, :], keys.new_zeros(0), items.long(),
                             match_weights(gaps, clicks, mask).to(keys.dtype))
        read, _ = _read(self.interest_query, state)  # (B, H, 1, d_h)
        interest = self.interest(torch.cat(
            [read.flatten(1), self.activity(activity(gaps, clicks, mask))], -1))
        return state._replace(interest=interest)

    def interact(self, state: HistoryState, targets) -> tuple[torch.Tensor, torch.Tensor]:
        """``state`` of B users, targets (B, T) int64 -> (emb (B, T, D), logit (B, T))."""
        t, t_bias = self.items(targets), self.item_bias(targets)
        read, intensity = _read(self._split_heads(self.query(t)), state)
        read = self.attn_out(read.transpose(1, 2).flatten(2))  # (B, T, d)
        user = state.interest[:, None, :].expand(-1, t.shape[1], -1)
        matches = exact_matches(targets.long(), state.items, state.match)
        features = torch.cat([read, t, user * t, read * t, intensity.transpose(1, 2), t_bias,
                              matches], -1)
        emb = self.head(features)
        return emb, self.out(emb).squeeze(-1)

    def encode(self, items, clicks, gaps, mask) -> HistoryState:
        """The contract's ``encode``: :meth:`encode_history`."""
        return self.encode_history(items, clicks, gaps, mask)

    def embed(self, state: HistoryState, targets) -> tuple[torch.Tensor, torch.Tensor]:
        """The contract's ``embed``: :meth:`interact` (emb (B, T, D), logit (B, T))."""
        return self.interact(state, targets)

    def forward(self, items, clicks, gaps, mask, targets):
        """Shared-history path: encode each history once, score all its targets."""
        return self.interact(self.encode_history(items, clicks, gaps, mask), targets)


def foundation_net(config: dict) -> FoundationNet:
    """The artefact factory (``solaris_lib.model.network:foundation_net``): a freshly
    initialised network of a ``config.json`` (:meth:`FoundationConfig.to_dict`)."""
    return FoundationNet(FoundationConfig.from_dict(config))
