"""Serving wrapper of the foundation model: owns device, ``eval()`` and ``inference_mode``.

``FoundationEmbedder.load(path)`` takes a version folder or a model root (then the serving
version). Histories are :class:`~solaris_lib.model.examples.EventLists` (e.g. from the mined
``user_history`` table) or a single user's :class:`History`. Outputs are float32 numpy.

On CUDA the network runs under bf16 autocast (``autocast=True``, the default there); on CPU it
runs in fp32. The network is any :class:`~solaris_lib.model.contract.InteractionModel` (the
foundation model, the two-tower model, or a team's own, named by the artefact's manifest).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from solaris_lib.model import artefact
from solaris_lib.model.examples import EventLists, ranges

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class History:
    """One user's events, oldest first: ``item_ids`` (n,) int64, ``ts_us`` (n,) int64 epoch
    microseconds, ``clicked`` (n,) int8 codes (0 no, 1 yes, 2 unknown)."""

    item_ids: np.ndarray
    ts_us: np.ndarray
    clicked: np.ndarray

    @classmethod
    def empty(cls) -> History:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))

    @classmethod
    def of(cls, item_ids, ts, clicked=None) -> History:
        """From item ids, datetimes or epoch-µs ints, and bools/None clicks."""
        ts_us = np.array([_us(t) for t in ts], np.int64)
        codes = np.full(len(ts_us), 2, np.int8) if clicked is None else np.array(
            [2 if c is None else int(bool(c)) for c in clicked], np.int8)
        return cls(np.asarray(item_ids, np.int64).reshape(-1), ts_us, codes)

    def as_events(self, user_id: int = 0) -> EventLists:
        return EventLists.from_events(np.full(len(self.item_ids), user_id, np.int64),
                                      self.item_ids, self.ts_us, self.clicked)


def _us(moment) -> int:
    if isinstance(moment, datetime):
        return int(round(moment.timestamp() * 1_000_000))
    return int(moment)


class FoundationEmbedder:
    """Interaction embeddings (n, dim) and click logits (n,) for (user history, item) pairs.

    Wraps an :class:`~solaris_lib.model.contract.InteractionModel` ``net`` and satisfies the
    contract itself (``encode``/``embed`` run under ``inference_mode`` and the autocast
    setting). Logits of a model without one come out NaN."""

    max_pairs_per_pass = 32768  # padded (user, target) slots per forward pass

    def __init__(self, net, version: str, device=None, autocast: bool | None = None) -> None:
        import torch

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.net = net.to(self.device).eval()
        self.cfg = getattr(net, "cfg", None)
        self.version = version
        self.autocast = (self.device.type == "cuda") if autocast is None else autocast

    @classmethod
    def load(cls, model_root_or_version_dir: str, device=None, *, version: str | None = None,
             autocast: bool | None = None, factories=None) -> FoundationEmbedder:
        """Load a version folder, or ``version`` (default: the serving one) of a model root,
        through the factory its manifest names; ``factories`` are the allowed ones (the
        ``SOLARIS_MODEL_FACTORIES`` setting; default: the shipped models)."""
        from solaris_lib.model.contract import SHIPPED_FACTORIES

        folder, version = artefact.resolve(model_root_or_version_dir, version)
        net = artefact.load_model(folder, version,
                                  factories=SHIPPED_FACTORIES if factories is None else factories)
        log.info("loaded model %s (%s) from %s", version, type(net).__name__, folder)
        return cls(net, version, device, autocast)

    @property
    def dim(self) -> int:
        return self.net.dim

    @property
    def max_history(self) -> int:
        return self.net.max_history

    @property
    def max_clicks(self) -> int:
        return self.net.max_clicks

    def to(self, device) -> FoundationEmbedder:
        import torch

        self.device = torch.device(device)
        self.net = self.net.to(self.device)
        return self

    def eval(self) -> FoundationEmbedder:
        self.net.eval()
        return self

    def encode(self, items, clicks, gaps, mask):
        """The contract's ``encode`` on this wrapper's device, without autograd."""
        import torch

        with torch.inference_mode(), self._autocast():
            return self.net.encode(items, clicks, gaps, mask)

    def embed(self, state, targets):
        """The contract's ``embed`` on this wrapper's device, without autograd."""
        import torch

        with torch.inference_mode(), self._autocast():
            return self.net.embed(state, targets)

    def _to_device(self, tensor):
        """A host tensor on the model's device: on CUDA through pinned memory, copied without
        blocking (the copy overlaps the previous pass's work)."""
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _autocast(self):
        import torch

        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast)

    def embed_user(self, history: History, item_ids, asof) -> np.ndarray:
        """(n, dim) float32 embeddings of one user's ``item_ids`` (n,) at time ``asof``."""
        return self.score_user(history, item_ids, asof)[0]

    def score_user(self, history: History, item_ids, asof) -> tuple[np.ndarray, np.ndarray]:
        """(emb (n, dim) float32, logits (n,) float32) for one user; the history is encoded once."""
        items = np.asarray(item_ids, np.int64).reshape(-1)
        emb, logits = self.score_users(history.as_events(0), np.zeros(1, np.int64),
                                       np.array([len(items)]), items, _us(asof))
        return emb, logits

    def score_users(self, events: EventLists, user_ids, counts, item_ids, asof,
                    naive: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Ragged batch: user ``user_ids[k]`` (U,) scores the next ``counts[k]`` of ``item_ids``
        (N,). Users absent from ``events`` get the empty history. ``asof`` (epoch µs or
        datetime, or (U,) µs) is the scoring time; only events before it are used.
        Returns (emb (N, dim) float32, logits (N,) float32) in ``item_ids`` order.
        ``naive`` re-encodes the history for every pair (the reference path)."""
        user_ids = np.asarray(user_ids, np.int64)
        counts = np.asarray(counts, np.int64)
        now = (np.full(len(user_ids), _us(asof), np.int64) if np.ndim(asof) == 0
               else np.asarray(asof, np.int64))
        item_ids = np.asarray(item_ids, np.int64)
        lo, hi = events.history_bounds(user_ids, now)
        starts = np.append(0, np.cumsum(counts)[:-1]).astype(np.int64)
        emb = np.zeros((len(item_ids), self.dim), np.float32)
        logits = np.zeros(len(item_ids), np.float32)
        for chunk in self._passes(counts):
            if not counts[chunk].any():
                continue
            hist = events.history(lo[chunk], hi[chunk], now[chunk], self.max_history,
                                  self.max_clicks)
            pairs = ranges(starts[chunk], counts[chunk])
            emb[pairs], logits[pairs] = self._run(hist, counts[chunk], item_ids[pairs], naive)
        return emb, logits

    def _passes(self, counts: np.ndarray):
        """Users grouped into forward passes of similar item counts (sorted), each padding to
        at most ``max_pairs_per_pass`` target slots (a user with more items gets a pass alone)."""
        order = np.argsort(counts, kind="stable")
        start = 0
        for end in range(1, len(order) + 1):
            if end == len(order) or (end + 1 - start) * counts[order[end]] > self.max_pairs_per_pass:
                yield order[start:end]
                start = end

    def _run(self, hist: dict, counts: np.ndarray, item_ids: np.ndarray, naive: bool):
        import torch

        from solaris_lib.model.contract import naive_embed

        width = int(counts.max()) if len(counts) else 0
        starts = np.append(0, np.cumsum(counts)[:-1])
        tmask = np.arange(width)[None, :] < counts[:, None]
        targets = np.where(tmask, item_ids[np.where(tmask, starts[:, None] + np.arange(width), 0)]
                           if len(item_ids) else 0, 0)
        t = {k: self._to_device(torch.from_numpy(np.ascontiguousarray(v)))
             for k, v in {**hist, "targets": targets}.items()}
        args = (t["items"], t["clicks"], t["gaps"], t["mask"], t["targets"])
        with torch.inference_mode(), self._autocast():
            if naive:
                emb, logits = naive_embed(self.net, *args)
            else:
                emb, logits = self.net.embed(self.net.encode(*args[:4]), args[4])
        keep = torch.from_numpy(tmask).to(self.device)
        if logits is None:
            logits = torch.full(emb.shape[:2], float("nan"), device=self.device)
        return (emb[keep].float().cpu().numpy(), logits[keep].float().cpu().numpy())
