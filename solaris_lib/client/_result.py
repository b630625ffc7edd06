"""What one lookup returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solaris_lib.fallback import Level


@dataclass(frozen=True)
class LookupResult:
    """The embeddings of one user's items, row ``i`` for ``item_ids[i]``.

    ``embeddings``: (n, dim) float32; a missed row holds the client's fallback (zeros unless
    configured). ``hit``: (n,) bool, True for an exact value only. ``level``: (n,) int8 of
    :class:`Level`: ``EXACT`` for a hit; ``CLUSTER`` for a row without an exact value that
    holds the (user, item cluster) embedding of the hierarchical fallback (versions that have
    the level); ``ITEM`` for a row with neither that holds the item's prior (the FM's
    embedding for an empty history; versions with the ITEM level); ``MISS`` otherwise (the row
    holds the fallback vector). ``version`` and
    ``model_version`` name the cache version and the model that produced every hit row (one
    version per lookup, never a mix); None before any version is known. ``error`` says why no
    row is exact when the call did not reach the cache: ``"timeout"``, ``"connection"``,
    ``"server"``, ``"circuit_open"``, ``"no_version"`` or ``"closed"``; None otherwise (rows
    whose item has a prior held in memory still get it, with level ``ITEM``).
    """

    embeddings: np.ndarray
    hit: np.ndarray
    level: np.ndarray
    version: str | None
    model_version: str | None
    error: str | None = None

    @property
    def hits(self) -> int:
        return int(self.hit.sum())

    def __len__(self) -> int:
        return len(self.hit)


def all_misses(
    n: int, dim: int, fallback: np.ndarray | None, version: str | None,
    model_version: str | None, error: str | None,
) -> LookupResult:
    """A result where no row hit (errors, no version yet, empty requests)."""
    if fallback is None:
        embeddings = np.zeros((n, dim), dtype=np.float32)
    else:
        embeddings = np.tile(fallback, (n, 1))
    return LookupResult(
        embeddings, np.zeros(n, dtype=bool), np.full(n, Level.MISS, dtype=np.int8), version,
        model_version, error,
    )
