"""What SOLARIS needs from any foundation model: the :class:`InteractionModel` contract.

SOLARIS precomputes *interaction embeddings* for (user, item) pairs. A model that fits the
contract encodes a batch of user histories **once per user** (:meth:`InteractionModel.encode`)
and then embeds many target items against each encoded history
(:meth:`InteractionModel.embed`): the shared-history path that makes batch inference cheap.

Shapes: ``B`` users, ``L`` history slots, ``T`` targets per user, ``D`` = ``dim``.

Histories (oldest first; valid slots need not be contiguous, ``mask`` says which):

* ``items``  (B, L) int64   raw item ids (the model hashes or maps them; unknown ids must work)
* ``clicks`` (B, L) int64   0 = not clicked, 1 = clicked, 2 = unknown
* ``gaps``   (B, L) float32 seconds between the event and the scoring time (>= 0)
* ``mask``   (B, L) bool    True where the slot holds an event (an all-False row: no history)

Targets: ``targets`` (B, T) int64 raw item ids.

What every implementation guarantees (``tests/unit/model/test_contract.py`` checks them):

* **Shared history = per pair**: ``embed(encode(h), targets)`` equals encoding ``h`` again for
  every single target, within 1e-4 in fp32.
* **Batch invariance**: a user's outputs depend only on its own history and targets, not on
  the other users in the batch, nor on padding (extra masked slots or padded targets).
* **Determinism** in ``eval()`` mode: the same inputs give the same outputs.
* **Finite outputs** for finite weights and any valid input (empty histories, unknown items).

Artefacts (:mod:`solaris_lib.model.artefact`) name their implementation as ``module:factory``
in ``manifest.json``; ``factory(config: dict)`` builds the model (a ``torch.nn.Module`` with
freshly initialised weights) from the artefact's ``config.json`` and the loader then loads
``weights.pt`` into it (``weights_only=True``, keys and shapes checked). Only factories listed
in the ``SOLARIS_MODEL_FACTORIES`` setting load (default :data:`SHIPPED_FACTORIES`).

This module does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from solaris_lib.config import SHIPPED_FACTORIES

if TYPE_CHECKING:
    import torch

FOUNDATION_FACTORY, TWO_TOWER_FACTORY = SHIPPED_FACTORIES
# torch.export programs (solaris_lib/model/exported.py): allowed only when listed explicitly
EXPORTED_FACTORY = "solaris_lib.model.exported:exported_program"


@runtime_checkable
class InteractionModel(Protocol):
    """A foundation model SOLARIS can precompute interaction embeddings with.

    Loading onto a device: an implementation is a ``torch.nn.Module``-like object; the serving
    wrapper (:class:`~solaris_lib.model.online.FoundationEmbedder`) calls ``to(device)`` and
    ``eval()`` once and runs ``encode``/``embed`` under ``torch.inference_mode()`` (and bf16
    autocast on CUDA). Implementations must not move tensors to a device themselves.
    """

    @property
    def dim(self) -> int:
        """``D``: width of the interaction embedding (the cache stores D fp16 values)."""

    @property
    def version(self) -> str:
        """The artefact version the weights came from (``model_version`` of the output)."""

    @property
    def max_history(self) -> int:
        """Newest events of a user the model reads (the history builder keeps this many)."""

    @property
    def max_clicks(self) -> int:
        """Newest clicked events kept before those (0: none). ``L = max_history + max_clicks``."""

    def encode(self, items: torch.Tensor, clicks: torch.Tensor, gaps: torch.Tensor,
               mask: torch.Tensor) -> Any:
        """Encode B histories (each (B, L), see the module docstring) once.

        Returns an opaque state that :meth:`embed` reads; every tensor in it has the batch
        dimension first, on the inputs' device. Cost should not depend on ``T``.
        """

    def embed(self, state: Any, targets: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Embed targets (B, T) int64 against ``state`` of the same B users.

        Returns ``(emb, logit)``: ``emb`` (B, T, D) float (float32 outside autocast), the
        interaction embedding; ``logit`` (B, T) float, the click logit (log-odds), or ``None``
        for a model without one. Padded target slots may hold any id; their outputs are ignored.
        """

    def to(self, device: Any) -> InteractionModel:
        """Move the weights to ``device`` (``torch.device`` or str); returns the model."""

    def eval(self) -> InteractionModel:
        """Inference mode (no dropout): required for determinism; returns the model."""


def naive_embed(model: InteractionModel, items, clicks, gaps, mask, targets, chunk: int = 4096):
    """The per-pair reference of any :class:`InteractionModel`: re-encode the history for each
    of the B*T (user, target) pairs, ``chunk`` pairs at a time. Same inputs and outputs as
    ``model.embed(model.encode(...), targets)`` (logit ``None`` when the model has none)."""
    import torch

    b, t = targets.shape
    idx = torch.arange(b, device=targets.device).repeat_interleave(t)
    flat = targets.reshape(-1, 1)
    embs, logits = [], []
    for start in range(0, b * t, chunk):
        sel = idx[start:start + chunk]
        state = model.encode(items[sel], clicks[sel], gaps[sel], mask[sel])
        emb, logit = model.embed(state, flat[start:start + chunk])
        embs.append(emb[:, 0])
        logits.append(None if logit is None else logit[:, 0])
    if not embs:
        return (targets.new_zeros((b, t, model.dim), dtype=torch.float32),
                targets.new_zeros((b, t), dtype=torch.float32))
    logit = None if logits[0] is None else torch.cat(logits).reshape(b, t)
    return torch.cat(embs).reshape(b, t, -1), logit
