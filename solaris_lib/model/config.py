"""Size and feature settings of the foundation model (frozen dataclass, unknown keys rejected).

Presets, from unit tests to "too expensive to serve online" (history = newest events + newest
clicks before them):

========= ======= ====== ===== ========= ===========================================
preset    d_model layers heads history   use
========= ======= ====== ===== ========= ===========================================
test      16      0      2     8 + 4     unit tests (milliseconds)
small     48      0      4     96 + 64   CPU: demo, transfer report, integration tests
default   128     2      4     128 + 64  GPU: benchmarks; too slow inside a request
large     256     4      8     256 + 128 GPU: scale-out experiments
========= ======= ====== ===== ========= ===========================================
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from solaris_lib.errors import ConfigError
from solaris_lib.model.contract import FOUNDATION_FACTORY


@dataclass(frozen=True)
class FoundationConfig:
    """Every hyper-parameter that shapes the network, its inputs and its training.

    Items are hashed into ``item_buckets`` rows by ``item_hashes`` independent hashes (the
    embeddings of an item sum its rows), so an item never seen in training still gets a vector. A history is the newest ``max_history`` events
    plus the newest ``max_clicks`` clicked events before them (clicks are rare and say most).
    """

    factory: ClassVar[str] = FOUNDATION_FACTORY  # the artefact factory of its network
    dim: int = 64  # output interaction embedding width
    d_model: int = 64  # width of every token inside the network
    layers: int = 0  # self-attention encoder layers over the history
    heads: int = 4  # heads of the target attention (and the encoder)
    ffn_mult: int = 4  # feed-forward width = ffn_mult * d_model
    max_history: int = 64  # newest events kept per user
    max_clicks: int = 32  # newest clicked events kept before those
    item_buckets: int = 1 << 16  # rows of the hashed item table
    item_hashes: int = 2  # hashes per item (summed)
    gap_buckets: int = 64  # time-gap buckets: gap_per_octave per doubling of minutes
    gap_per_octave: int = 4
    dropout: float = 0.1
    # training: AdamW, linear warm-up then cosine decay over ``epochs``, early stopping
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup_share: float = 0.05  # share of all steps spent warming up
    batch_requests: int = 256  # requests per training step (each with its shown candidates)
    epochs: int = 8  # most epochs; training stops earlier when validation stops improving
    patience: int = 2  # epochs without a better validation loss before stopping
    validation_share: float = 0.1  # newest share of training requests held for validation
    time_ordered: bool = True  # batches oldest first (the model ends on the newest requests)
    seed: int = 0

    @property
    def history_len(self) -> int:
        """History slots the network reads: recent events plus older clicks."""
        return self.max_history + self.max_clicks

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        for name in ("dim", "d_model", "layers", "heads", "max_history", "max_clicks",
                     "item_buckets", "item_hashes", "gap_buckets",
                     "gap_per_octave", "batch_requests", "epochs", "patience"):
            if getattr(self, name) < (0 if name in ("layers", "max_clicks") else 1):
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("lr",):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("dropout", "warmup_share", "validation_share"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)}")

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
    "test": FoundationConfig(dim=8, d_model=16, heads=2, max_history=8, max_clicks=4,
                             item_buckets=1024, gap_buckets=16, dropout=0.0,
                             batch_requests=64, epochs=2),
    "small": FoundationConfig(d_model=48, max_history=96, max_clicks=64, item_buckets=1 << 15,
                              batch_requests=128, epochs=1),
    "default": FoundationConfig(d_model=128, layers=2, heads=4, max_history=128, max_clicks=64,
                                item_buckets=1 << 18, epochs=12),
    "large": FoundationConfig(d_model=256, layers=4, heads=8, max_history=256, max_clicks=128,
                              item_buckets=1 << 20, epochs=12),
}
