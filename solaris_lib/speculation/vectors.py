"""Small vector tables on the driver: collected from Spark once, looked up by id in numpy.

The retrieval and query vectors (users or items x at most 32 floats) are small beside the pairs
and candidates that use them, so the passes over those (:mod:`recent`, :mod:`factor_scores`)
broadcast them as numpy arrays and find each row's vector by binary search in the sorted ids.
"""

from __future__ import annotations

import numpy as np


def collect(frames: dict, key: str) -> dict:
    """{name: pandas (key, factor)} of every (key, factor) frame, collected by one Spark job (a
    union tagged by name: each collect is a job of its own, and the tables are small)."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not frames:
        return {}
    tagged = [frame.select(F.lit(name).alias("_name"), F.col(key).cast("long").alias(key),
                           F.col("factor").cast("array<float>").alias("factor"))
              for name, frame in frames.items()]
    together = reduce(lambda a, b: a.unionByName(b), tagged).toPandas()
    return {name: together[together["_name"] == name].drop(columns="_name")
            for name in frames}


def table(frames: dict, key: str) -> tuple[np.ndarray, dict]:
    """(sorted ids (n,) int64, {name: (n, dim) float32 with NaN rows where absent}) of the
    (key, factor) ``frames``: one row per id of any of them."""
    local = collect(frames, key)
    ids = np.unique(np.concatenate([f[key].to_numpy(np.int64) for f in local.values()]
                                   or [np.zeros(0, np.int64)]))
    tables = {}
    for name, frame in local.items():
        vectors = np.stack(frame["factor"].to_numpy()).astype(np.float32) if len(frame) else \
            np.zeros((0, 1), np.float32)
        matrix = np.full((len(ids), vectors.shape[1]), np.nan, np.float32)
        matrix[np.searchsorted(ids, frame[key].to_numpy(np.int64))] = vectors
        tables[name] = matrix
    return ids, tables


def lookup(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of each ``wanted`` id in the sorted ``ids``; -1 where absent."""
    if len(ids) == 0:
        return np.full(len(wanted), -1)
    rows = np.clip(np.searchsorted(ids, wanted), 0, len(ids) - 1)
    return np.where(ids[rows] == wanted, rows, -1)


def present(ids: np.ndarray, matrix: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of each ``wanted`` id in ``matrix`` (a :func:`table` entry); -1 where the id is
    absent or its row is NaN (no vector of this name: a vector whose first value is NaN counts
    as none)."""
    rows = lookup(ids, wanted)
    found = rows >= 0
    found[found] = ~np.isnan(matrix[rows[found], 0])
    return np.where(found, rows, -1)
