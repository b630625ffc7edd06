"""A second foundation model: two towers joined by a DCN-style cross layer.

Structurally unlike :class:`~solaris_lib.model.network.FoundationNet` (no target attention: the
user is one vector computed without looking at the target), it is the worked example of
``docs/models.md`` and implements :class:`~solaris_lib.model.contract.InteractionModel`.

Shapes: ``B`` users, ``L`` history slots, ``T`` targets, ``d`` = ``d_model``, ``K`` time
scales, ``D`` = ``dim`` (64).

::

    history (B, L): hashed item row + click-code row ─► x_j (B, L, d)
       time-decay pooling at K half-lives: w_jk = mask_j * 2^(-gap_j / half_life_k)
       pooled_k = Σ_j w_jk x_j / (1 + Σ_j w_jk), mass_k = log(1 + Σ_j w_jk)
       user tower: MLP([pooled (K d), mass (K), activity counts (8)]) ─► u (B, d)   ONCE PER USER
    targets (B, T): hashed item row ─► item tower MLP ─► i (B, T, d); item bias b_t
       cross layers over x0 = LayerNorm([u, i, u*i]) (B, T, 3d):                  PER TARGET
       x_{l+1} = x0 * (W_l x_l + c_l) + x_l   (DCN-v2)
       ─► Linear + GELU ─► interaction embedding (B, T, D) ─► linear + b_t ─► logit (B, T)

The half-lives are learnt (stored as their logarithm), starting at 1 h, 1 d and 7 d.
Trained by :func:`solaris_lib.model.train.fit` on a :class:`TwoTowerConfig`, which runs
``train_loop`` (the same AdamW schedule, validation slice and early stopping as the foundation
model).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import nn

from solaris_lib.errors import ConfigError
from solaris_lib.model.contract import TWO_TOWER_FACTORY
from solaris_lib.model.network import ContractNet, HashedTable, activity


@dataclass(frozen=True)
class TwoTowerConfig:
    """Size and training settings of :class:`TwoTowerNet` (unknown keys rejected).

    The training fields have the meaning and names of
    :class:`~solaris_lib.model.config.FoundationConfig`'s, so ``train_loop`` reads either."""

    factory: ClassVar[str] = TWO_TOWER_FACTORY  # the artefact factory of its network
    dim: int = 64  # interaction embedding width
    d_model: int = 64  # width of both towers
    cross_layers: int = 2
    half_lives_s: tuple[float, ...] = (3600.0, 86400.0, 7 * 86400.0)  # initial time scales
    max_history: int = 64
    max_clicks: int = 32
    item_buckets: int = 1 << 16
    item_hashes: int = 2
    dropout: float = 0.0
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup_share: float = 0.05
    batch_requests: int = 256
    epochs: int = 8
    patience: int = 2
    validation_share: float = 0.1
    time_ordered: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "half_lives_s", tuple(float(h) for h in self.half_lives_s))
        for name in ("dim", "d_model", "max_history", "item_buckets", "item_hashes",
                     "batch_requests", "epochs", "patience"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.cross_layers < 0 or self.max_clicks < 0:
            raise ConfigError("cross_layers and max_clicks must be >= 0")
        if not self.half_lives_s or min(self.half_lives_s) <= 0:
            raise ConfigError(f"half_lives_s must be positive, got {self.half_lives_s}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be positive, got {self.lr}")
        for name in ("dropout", "warmup_share", "validation_share"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)}")

    @classmethod
    def preset(cls, name: str, **overrides: object) -> TwoTowerConfig:
        if name not in TWO_TOWER_PRESETS:
            raise ConfigError(f"unknown two-tower preset {name!r}; known: "
                              f"{', '.join(TWO_TOWER_PRESETS)}")
        return dataclasses.replace(TWO_TOWER_PRESETS[name], **overrides)

    @classmethod
    def from_dict(cls, values: dict) -> TwoTowerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown two-tower config keys: {', '.join(unknown)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "half_lives_s": list(self.half_lives_s)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)


TWO_TOWER_PRESETS: dict[str, TwoTowerConfig] = {
    "test": TwoTowerConfig(d_model=16, max_history=8, max_clicks=4, item_buckets=1024,
                           batch_requests=64, epochs=2),
    "small": TwoTowerConfig(d_model=48, max_history=48, max_clicks=32, item_buckets=1 << 15),
    "default": TwoTowerConfig(d_model=128, max_history=128, max_clicks=64,
                              item_buckets=1 << 18, epochs=12),
    "large": TwoTowerConfig(d_model=256, max_history=256, max_clicks=128,
                            item_buckets=1 << 20, epochs=12),
}


class UserState(NamedTuple):
    """What ``encode`` computes once per user."""

    user: torch.Tensor  # (B, d)


class CrossLayer(nn.Module):
    """DCN-v2 cross: ``x0 * (W x + c) + x`` over (…, width)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        nn.init.normal_(self.linear.weight, std=0.1 / math.sqrt(width))

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.linear(x) + x


class TwoTowerNet(ContractNet):
    """User tower (time-decay pooled history) x item tower (hashed id), crossed; an
    :class:`~solaris_lib.model.contract.InteractionModel`."""

    version = "unversioned"

    def __init__(self, cfg: TwoTowerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, k = cfg.d_model, len(cfg.half_lives_s)
        self.items = HashedTable(cfg.item_buckets, d, cfg.item_hashes, std=0.1)
        self.item_bias = HashedTable(cfg.item_buckets, 1, cfg.item_hashes, std=0.0)
        self.click_emb = nn.Embedding(3, d)
        nn.init.normal_(self.click_emb.weight, std=0.1)
        self.log_half_life = nn.Parameter(torch.log(torch.tensor(cfg.half_lives_s)))
        n_activity = 8  # activity(): events and clicks in 4 windows
        self.user_tower = nn.Sequential(
            nn.LayerNorm(k * d + k + n_activity), nn.Linear(k * d + k + n_activity, 2 * d),
            nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(2 * d, d))
        self.item_tower = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.cross_norm = nn.LayerNorm(3 * d)
        self.cross = nn.ModuleList(CrossLayer(3 * d) for _ in range(cfg.cross_layers))
        self.head = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(3 * d, cfg.dim), nn.GELU())
        self.out = nn.Linear(cfg.dim, 1)

    def encode(self, items, clicks, gaps, mask) -> UserState:
        """(B, L) histories -> the user vector (B, d); padded slots weigh exactly zero."""
        mask, clicks = mask.bool(), clicks.long()
        x = self.items(items) + self.click_emb(clicks)  # (B, L, d)
        gaps = torch.clamp(gaps.float(), min=0.0)
        rate = math.log(2.0) * torch.exp(-self.log_half_life)  # (K,) per second
        w = torch.exp(-gaps[..., None] * rate) * mask[..., None]  # (B, L, K)
        mass = w.sum(1)  # (B, K)
        pooled = torch.einsum("blk,bld->bkd", w, x) / (1.0 + mass)[..., None]
        feats = torch.cat([pooled.flatten(1), torch.log1p(mass),
                           activity(gaps, clicks, mask)], -1)
        return UserState(self.user_tower(feats))

    def embed(self, state: UserState, targets) -> tuple[torch.Tensor, torch.Tensor]:
        """targets (B, T) int64 -> (emb (B, T, D), logit (B, T))."""
        i = self.item_tower(self.items(targets))  # (B, T, d)
        u = state.user[:, None, :].expand_as(i)
        x0 = self.cross_norm(torch.cat([u, i, u * i], -1))
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        emb = self.head(x)
        return emb, self.out(emb).squeeze(-1) + self.item_bias(targets).squeeze(-1)

    def forward(self, items, clicks, gaps, mask, targets):
        """Shared-history path (what ``train_loop`` calls)."""
        return self.embed(self.encode(items, clicks, gaps, mask), targets)


def two_tower_net(config: dict) -> TwoTowerNet:
    """The artefact factory (``solaris_lib.model.two_tower:two_tower_net``)."""
    return TwoTowerNet(TwoTowerConfig.from_dict(config))
