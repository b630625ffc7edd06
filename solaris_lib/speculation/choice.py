"""The choice model: user and item vectors that explain which items each user was scored on.

A request's candidates are the upstream retrieval's picks among the live catalogue, drawn by the
user's interest. The choice model is that draw as a softmax over the items of the window::

    P(item j | user u) = softmax_j(x_u . y_j + b_j)        x_u, y_j: (dim,) floats, b_j: scalar

fitted to the window's rows, each weighted ``2 ** (-age / choice_half_life)`` at the window's
end (interests drift), by maximising the weighted mean log-likelihood per row minus
``choice_reg * (mean_u |x_u|^2 + mean_j |y_j|^2)`` with full-batch Adam (``choice_steps`` steps).
The bias ``b_j`` takes the item's popularity and pacing, so ``y_j`` places the item by *who* is
scored on it. ALS's implicit loss treats every unseen pair alike; the softmax compares an item
with the rest of the catalogue the user could have been shown, which is how the candidates were
drawn. On the default simulated world its vectors correlate far better with the hidden true
affinity than ALS's (docs/speculation.md, "The choice model").

Outputs ``(user_id long, factor array<float>)`` (the ALS factors' schema) and ``(item_id long,
factor array<float>, bias float)``; the scorer uses the logit ``x_u . y_j + b_j`` (feature
``choice``, :func:`logit_vectors`; the faiss source searches it at the item's current rate,
:func:`candidates.faiss_vectors`) and the user's 6-hour query
in the space of the ``y_j`` (``choice_sim_short``, :mod:`recent`).

Cost: each step multiplies users x items x dim twice (1,500 users x 5,500 items x 16 x 300
steps: 18-27 s on the two CPU cores here when they are free); it runs on the GPU when torch sees
one. The dense logits are bounded by ``choice_chunk_cells``: users are processed in batches
(chunks) and their gradients add up before each step, so the fit is the same whatever the
chunking (up to the order of float sums); the pairs stay sparse.

Catalogues above ``choice_full_items`` (1e5) use a sampled softmax: each step draws
``choice_negatives`` items with probability ``q_k`` proportional to their row weight^0.75
(shared by every user of the step) and estimates each user's normaliser by importance
sampling, ``log sum_j exp(s_uj) ~ logsumexp_k(s_uk - log(M q_k))``; the chosen pairs' logits are
computed pair by pair. A step then costs users x M x dim instead of users x items x dim.
The pairs are collected to the driver (about 24 bytes per distinct pair).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

import numpy as np

from solaris_lib.speculation.config import RetrievalConfig

log = logging.getLogger(__name__)

LOG_EVERY = 50


def choice_rows(logs, end: datetime, half_life_s: float):
    """(user_id, item_id, weight double): each pair's rows weighted by their age at ``end``."""
    from solaris_lib.speculation.mine import decayed_sum

    return logs.groupBy("user_id", "item_id").agg(decayed_sum(end, half_life_s).alias("weight"))


def fit_choice(users: np.ndarray, items: np.ndarray, weight: np.ndarray, shape: tuple[int, int],
               config: RetrievalConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit the softmax on weighted pairs; returns (x (U, dim), y (I, dim), b (I,)) float32.

    ``users``, ``items``: int row indices (n,) into ``shape = (U, I)``; ``weight``: (n,) > 0.
    Deterministic for a seed on the CPU (on CUDA the scatter-add behind the pair gather sums in
    no fixed order, so reruns may differ in the last bits).
    """
    import torch

    if len(weight) == 0 or float(np.sum(weight)) <= 0:
        raise ValueError("fit_choice needs at least one pair with a positive weight")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(config.seed)
    n_users, n_items = shape
    x = (0.1 * torch.randn(n_users, config.choice_dim, generator=generator)).to(device)
    y = (0.1 * torch.randn(n_items, config.choice_dim, generator=generator)).to(device)
    b = torch.zeros(n_items, device=device)
    params = [p.requires_grad_() for p in (x, y, b)]
    sampler = _sampler(items, weight, n_items, config, device)
    columns = config.choice_negatives if sampler is not None else n_items
    chunks = _chunks(users, items, weight, (n_users, columns), config.choice_chunk_cells, device)
    total = float(np.sum(weight))
    optimiser = torch.optim.Adam(params, lr=config.choice_lr)
    started = time.monotonic()
    for step in range(config.choice_steps):
        optimiser.zero_grad()
        negatives = sampler(generator) if sampler is not None else None
        nll = sum(_chunk_loss(chunk, x, y, b, total, negatives) for chunk in chunks)
        penalty = config.choice_reg * (x.pow(2).sum(1).mean() + y.pow(2).sum(1).mean())
        penalty.backward()
        optimiser.step()
        if step % LOG_EVERY == 0 or step == config.choice_steps - 1:
            log.info("choice model step %d/%d: loss %.4f per unit of row weight (%.1f steps/s)",
                     step + 1,
                     config.choice_steps, nll + float(penalty.detach()),
                     (step + 1) / max(time.monotonic() - started, 1e-9))
    return tuple(p.detach().cpu().numpy().astype(np.float32) for p in params)


def _sampler(items, weight, n_items: int, config: RetrievalConfig, device):
    """None for a full softmax; else a function ``generator -> (items (M,), log(M q) (M,))``
    drawing ``choice_negatives`` items with replacement, ``q`` proportional to row weight^0.75."""
    import torch

    if n_items <= config.choice_full_items:
        return None
    mass = np.bincount(items, weights=weight, minlength=n_items) ** 0.75 + 1e-12
    q = torch.as_tensor(mass / mass.sum(), dtype=torch.float64)
    m = config.choice_negatives
    log.info("choice model: %d items > %d, sampled softmax over %d items per step", n_items,
             config.choice_full_items, m)

    def draw(generator):
        drawn = torch.multinomial(q, m, replacement=True, generator=generator)
        correction = torch.log(m * q[drawn]).to(torch.float32)
        return drawn.to(device), correction.to(device)

    return draw


def _chunks(users, items, weight, shape, cells: int, device) -> list:
    """[(first user row, last + 1, pair rows in the chunk (n,), pair items (n,), pair weights (n,),
    each user's total weight (last - first,))] covering all users, each chunk at most ``cells``
    logits (``shape`` = (users, logit columns per user); at least one user). The pairs stay
    sparse: only a chunk's logits are ever dense."""
    import torch

    n_users, n_items = shape
    per_chunk = max(1, cells // max(n_items, 1))
    chunks = []
    for first in range(0, n_users, per_chunk):
        last = min(first + per_chunk, n_users)
        mask = (users >= first) & (users < last)
        rows = users[mask] - first
        totals = np.bincount(rows, weights=weight[mask], minlength=last - first)
        chunks.append((first, last) + tuple(
            torch.as_tensor(a, dtype=dtype, device=device)
            for a, dtype in ((rows, torch.long), (items[mask], torch.long),
                             (weight[mask], torch.float32), (totals, torch.float32))))
    return chunks


def _chunk_loss(chunk, x, y, b, total: float, negatives=None) -> float:
    """Backpropagate one chunk's share of the mean negative log-likelihood; returns its value.

    ``-sum_pairs w log softmax = -(sum_pairs w * logit - sum_users W_u * logsumexp_u)``; with
    ``negatives`` (sampled items, log(M q)) the normaliser is estimated on them and the chosen
    logits are computed pair by pair."""
    import torch

    first, last, rows, cols, weight, user_totals = chunk
    users = x[first:last]
    if negatives is None:
        logits = users @ y.T + b
        chosen = (weight * logits[rows, cols]).sum()
    else:
        drawn, correction = negatives
        logits = users @ y[drawn].T + b[drawn] - correction
        chosen = (weight * ((users[rows] * y[cols]).sum(1) + b[cols])).sum()
    loss = ((user_totals * torch.logsumexp(logits, dim=1)).sum() - chosen) / total
    loss.backward()
    return float(loss.detach())


def train_choice(logs, end: datetime, config: RetrievalConfig):
    """Fit the choice model on ``logs`` (already windowed, ending at ``end``); returns cached
    (user_factors, item_factors) DataFrames, or (None, None) when disabled or without rows."""
    if not config.choice:
        return None, None
    spark = logs.sparkSession
    rows = choice_rows(logs, end, config.choice_half_life.total_seconds()).toArrow()
    user_id = rows.column("user_id").to_numpy().astype(np.int64)
    item_id = rows.column("item_id").to_numpy().astype(np.int64)
    weight = rows.column("weight").to_numpy().astype(np.float64)
    order = np.lexsort((item_id, user_id))  # the shuffle's order varies: sum in a fixed one
    user_id, item_id, weight = user_id[order], item_id[order], weight[order]
    keep = weight > 0
    if not keep.any():
        log.warning("no rows in the choice model's window: no choice vectors")
        return None, None
    user_ids, users = np.unique(user_id[keep], return_inverse=True)
    item_ids, items = np.unique(item_id[keep], return_inverse=True)
    started = time.monotonic()
    x, y, b = fit_choice(users, items, weight[keep], (len(user_ids), len(item_ids)), config)
    log.info("choice model: %d users x %d items from %d pairs in %.1f s", len(user_ids),
             len(item_ids), int(keep.sum()), time.monotonic() - started)
    return (_factor_frame(spark, "user_id", user_ids, x),
            _factor_frame(spark, "item_id", item_ids, y, bias=b))


def _factor_frame(spark, key: str, ids: np.ndarray, vectors: np.ndarray, bias=None):
    """Cached (key long, factor array<float>[, bias float]) DataFrame of ``ids`` and their
    ``vectors`` (and ``bias`` (n,))."""
    import pandas as pd

    frame = pd.DataFrame({key: ids.astype(np.int64), "factor": list(vectors.astype(np.float32))})
    schema = f"{key} long, factor array<float>"
    if bias is not None:
        frame["bias"], schema = np.asarray(bias, np.float32), schema + ", bias float"
    result = spark.createDataFrame(frame, schema).cache()
    result.count()
    return result


def logit_vectors(users, items):
    """(user_id, [x_u, 1]) and (item_id, [y_j, b_j]) DataFrames whose inner product is the
    model's logit ``x_u . y_j + b_j`` (the log of P(j | u) up to the user's normaliser); items
    without a ``bias`` column (partitions written before it) get 0."""
    from pyspark.sql import functions as F

    bias = F.col("bias") if "bias" in items.columns else F.lit(0.0)
    one = F.array(F.lit(1.0).cast("float"))
    return (users.select("user_id", F.concat("factor", one).alias("factor")),
            items.select("item_id", F.concat("factor", F.array(bias.cast("float"))).alias("factor")))
