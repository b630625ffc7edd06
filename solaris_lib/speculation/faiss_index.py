"""FAISS nearest live items to each user's factor, built once on the driver, searched on executors.

The index holds the live items' vectors of the source that searches it (the choice model's
logit vectors or ALS factors for ``faiss``, unit ALS factors for ``item_faiss``; inner product). Catalogues up to
``exact_threshold`` items use exact ``IndexFlatIP``; larger ones an ``IndexIVFFlat`` whose
``nprobe`` is raised until recall@k against exact search on a query sample reaches the target
(the measured recall is returned). The index is serialized (``faiss.serialize_index``) and
broadcast; executors move it to a GPU when faiss-gpu sees one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solaris_lib.errors import MissingDependencyError

log = logging.getLogger(__name__)

RECALL_TARGET = 0.95


def _faiss():
    try:
        import faiss
    except ImportError as exc:
        raise MissingDependencyError("faiss-cpu (or faiss-gpu)", "FAISS retrieval") from exc
    return faiss


@dataclass(frozen=True)
class BuiltIndex:
    """A serialized index and how it was built; ``recall`` is None for exact indexes."""

    blob: bytes
    kind: str  # "flat" | "ivf"
    size: int
    nprobe: int | None
    recall: float | None


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Reference: ids (row numbers) of the k largest inner products.  (Q, D) x (N, D) -> (Q, k)."""
    scores = queries @ vectors.T
    k = min(k, vectors.shape[0])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of the true top-k ids that ``found`` contains.  Both (Q, k); -1 = no result."""
    hits = sum(len(set(f[f >= 0]) & set(t)) for f, t in zip(found, truth, strict=True))
    return hits / max(truth.size, 1)


def build_index(
    ids: np.ndarray, vectors: np.ndarray, *, exact_threshold: int, k: int,
    queries: np.ndarray | Callable[[], np.ndarray | None] | None = None, seed: int = 7,
) -> BuiltIndex:
    """Index ``vectors`` (N, D) float32 under int64 ``ids``; measure IVF recall@k on
    ``queries`` (or on what it returns when called: only an IVF index needs them)."""
    faiss = _faiss()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    n, dim = vectors.shape
    if n <= exact_threshold:
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        index.add_with_ids(vectors, ids)
        return BuiltIndex(bytes(faiss.serialize_index(index)), "flat", n, None, None)
    nlist = max(1, int(4 * math.sqrt(n)))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.train(vectors)
    index.add_with_ids(vectors, ids)
    queries = queries() if callable(queries) else queries
    nprobe, recall = _tune_nprobe(index, ids, vectors, queries, k, nlist, seed)
    log.info("IVF index: %d items, nlist %d, nprobe %d, recall@%d %.4f", n, nlist, nprobe, k, recall)
    return BuiltIndex(bytes(faiss.serialize_index(index)), "ivf", n, nprobe, recall)


def _tune_nprobe(index, ids, vectors, queries, k, nlist, seed) -> tuple[int, float]:
    """Smallest power-of-two nprobe whose recall@k on (up to 500) queries reaches the target."""
    if queries is None or len(queries) == 0:
        rng = np.random.default_rng(seed)
        queries = vectors[rng.choice(len(vectors), min(500, len(vectors)), replace=False)]
    rng = np.random.default_rng(seed)
    sample = queries[rng.choice(len(queries), min(500, len(queries)), replace=False)]
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    truth = ids[exact_top_k(vectors, sample, k)]
    nprobe, recall = 1, 0.0
    while True:
        index.nprobe = nprobe
        _, found = index.search(sample, min(k, len(ids)))
        recall = recall_at_k(found, truth)
        if recall >= RECALL_TARGET or nprobe >= nlist:
            return nprobe, recall
        nprobe = min(nprobe * 2, nlist)


def load_index(blob: bytes, nprobe: int | None):
    """Deserialize a broadcast index; on a GPU when faiss-gpu sees one (the one Spark assigned
    to the task, :func:`~solaris_lib.sparkutil.task_gpu`, else the first)."""
    from solaris_lib.sparkutil import task_gpu

    faiss = _faiss()
    index = faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
    if nprobe is not None:
        faiss.extract_index_ivf(index).nprobe = nprobe
    if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        gpu = task_gpu(faiss.get_num_gpus())
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), gpu or 0, index)
    return index


def search_users(spark, user_factors, built: BuiltIndex, k: int, fetch: int | None = None):
    """(user_id, item_id, faiss_score, faiss_rank) for each user's k nearest indexed items.

    When ``user_factors`` has a ``seen`` column (array<long>, may be null), the items in it are
    skipped: each user gets its ``k`` nearest unseen items among the ``fetch`` (>= k) nearest.
    """
    k = min(k, built.size)
    fetch = min(max(fetch or k, k), built.size)
    blob = spark.sparkContext.broadcast(built.blob)
    nprobe = built.nprobe
    schema = "user_id long, item_id long, faiss_score double, faiss_rank int"
    columns = ["user_id", "factor"] + (["seen"] if "seen" in user_factors.columns else [])

    def search(frames):
        index = None
        for frame in frames:
            if frame.empty:
                continue
            if index is None:
                index = load_index(blob.value, nprobe)
            queries = np.ascontiguousarray(np.stack(frame["factor"].to_numpy()), dtype=np.float32)
            scores, found = index.search(queries, fetch)
            yield _nearest_rows(frame, scores, found, k)

    return user_factors.select(*columns).mapInPandas(search, schema)


def _nearest_rows(frame, scores: np.ndarray, found: np.ndarray, k: int):
    """Rows of one searched batch: ``found`` (B, fetch) ids (-1: none) and their ``scores``;
    without each user's ``seen`` items (when ``frame`` has them), the first ``k`` kept."""
    import pandas as pd

    fetch = found.shape[1]
    rows = pd.DataFrame({
        "user_id": np.repeat(frame["user_id"].to_numpy(np.int64), fetch),
        "item_id": found.reshape(-1), "faiss_score": scores.reshape(-1).astype(np.float64),
    })
    rows = rows[rows["item_id"] >= 0]
    if "seen" in frame.columns:
        seen = frame[["user_id", "seen"]].explode("seen").dropna()
        seen = pd.MultiIndex.from_arrays([seen["user_id"].to_numpy(np.int64),
                                          seen["seen"].to_numpy(np.int64)])
        rows = rows[~pd.MultiIndex.from_frame(rows[["user_id", "item_id"]]).isin(seen)]
    rows = rows.assign(faiss_rank=rows.groupby("user_id", sort=False).cumcount() + 1)
    return rows[rows["faiss_rank"] <= k].astype({"faiss_rank": np.int32})
