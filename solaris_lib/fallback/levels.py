"""The fallback levels of a looked-up row, and how a row's level is resolved.

A served version can answer a (user, item) row at four levels, finest first:

======= ===================================================================================
EXACT   the pair's own embedding (the pair was speculated and embedded)
CLUSTER the (user, item cluster) embedding: the user's embedding with the cluster's
        representative item (the user was speculated, the item has a cluster)
ITEM    the item's prior: the FM's embedding of (empty history, item), held in the client's
        memory
MISS    none of these: the row holds the client's fallback vector
======= ===================================================================================

:func:`resolve_levels` is the one rule that picks a row's level from what the version holds for
it; the lookup client applies it to every lookup and the transfer report to every logged row,
so the report measures the levels the client serves.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

NO_CLUSTER = -1  # the cluster id of an item that is in no cluster


class Level(IntEnum):
    """Where a looked-up row's embedding came from; one ``int8`` per row of a lookup."""

    MISS = 0
    EXACT = 1
    CLUSTER = 2
    ITEM = 3


def resolve_levels(exact: np.ndarray, cluster: np.ndarray | None = None,
                   prior: np.ndarray | None = None) -> np.ndarray:
    """(n,) int8 :class:`Level` of each row: the finest level that holds a value for it.

    ``exact`` (n,) bool: the pair's own value is held; ``cluster`` (n,) bool: the user's value
    for the item's cluster is held; ``prior`` (n,) bool: the item's prior is held. None: the
    version does not serve that level (every row False).
    """
    level = exact.astype(np.int8)  # True -> EXACT (1), False -> MISS (0): one cast
    for held, code in ((cluster, Level.CLUSTER), (prior, Level.ITEM)):
        if held is not None:
            level[(level == Level.MISS) & held] = code
    return level
