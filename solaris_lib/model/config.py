"""Size and feature settings of the foundation model (frozen dataclass, unknown keys rejected).

Presets, from unit tests to "too expensive to serve online":

========= ======= ====== ===== =========== ==========================================
preset    d_model layers heads max_history use
========= ======= ====== ===== =========== ==========================================
test      16      1      2     12          unit tests (milliseconds)
small     48      1      4     40          demo and integration tests (trains in < 1 min)
default   256     4      8     200         benchmarks; too slow to run inside a request
large     512     6      8     200         scale-out experiments
========= ======= ====== ===== =========== ==========================================
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from solaris_lib.errors import ConfigError


@dataclass(frozen=True)
class FoundationConfig:
    """Every hyper-parameter that shapes the network and its inputs.

    Items are hashed into ``item_buckets`` rows by ``item_hashes`` independent hashes (the
    embeddings of an item sum its rows), so an item never seen in training still gets a vector.
    """

    dim: int = 64  # output interaction embedding width
    d_model: int = 64  # width of every token inside the network
    layers: int = 2  # transformer encoder layers over the history
    heads: int = 4  # attention heads (encoder and cross-attention)
    cross_layers: int = 1  # target -> history cross-attention blocks
    ffn_mult: int = 4  # feed-forward width = ffn_mult * d_model
    max_history: int = 50  # most recent events kept per user
    item_buckets: int = 1 << 16  # rows of the hashed item table
    item_hashes: int = 2  # hashes per item (summed)
    gap_buckets: int = 16  # log2 time-gap buckets (minutes)
    dropout: float = 0.1
    # training
    lr: float = 2e-3
    weight_decay: float = 1e-5
    batch_requests: int = 256  # requests per training step (each with its shown candidates)
    epochs: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        for name in ("dim", "d_model", "layers", "heads", "cross_layers", "max_history",
                     "item_buckets", "item_hashes", "gap_buckets", "batch_requests", "epochs"):
            if getattr(self, name) < (0 if name == "layers" else 1):
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")

    @classmethod
    def preset(cls, name: str, **overrides: object) -> FoundationConfig:
        """A named preset with some fields replaced."""
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}")
        return dataclasses.replace(PRESETS[name], **overrides)

    @classmethod
    def from_dict(cls, values: dict) -> FoundationConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown foundation config keys: {', '.join(unknown)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)


PRESETS: dict[str, FoundationConfig] = {
    "test": FoundationConfig(dim=8, d_model=16, layers=1, heads=2, max_history=12,
                             item_buckets=1024, gap_buckets=8, dropout=0.0, batch_requests=64),
    # small: 1 epoch. On the demo world a second epoch overfits (held-out log-loss 0.2716 at 1
    # epoch, 0.2733 at 2, 0.2771 at 3; the ID-only model: 0.2728).
    "small": FoundationConfig(d_model=48, layers=1, heads=4, max_history=40,
                              item_buckets=1 << 15, epochs=1),
    "default": FoundationConfig(d_model=256, layers=4, heads=8, cross_layers=2,
                                max_history=200, item_buckets=1 << 18, epochs=3),
    "large": FoundationConfig(d_model=512, layers=6, heads=8, cross_layers=2,
                              max_history=200, item_buckets=1 << 20, epochs=3),
}
