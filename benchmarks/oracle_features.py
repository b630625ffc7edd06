"""What would the scorer gain from the simulator's hidden state? Oracle features in the replay.

    solaris speculation-eval --logs var/world --cutoff 2026-01-12 --horizon 7d --budget-factor 3 \\
        --allocation global --faiss-k 2055 --dump-candidates var/dump --json
    python benchmarks/oracle_features.py --dump var/dump --logs var/world --cutoff 2026-01-12

The Bayes ceiling (``speculation_ceiling.py``) says how far coverage could go; this script says
which missing fact is worth it. It replays the simulator to the cutoff and adds facts about each
scored candidate (user u, item i) to the scorer's features, one group at a time:

* ``affinity``: the user's true interest at the cutoff . the item's true vector (and exp(4 x it),
  the simulator's draw weight); ``affinity_young_items`` / ``affinity_older_items``: the true
  affinity of the campaigns still in their delivery ramp-up at the cutoff only, or of the others
  only (with the ramp-up flag), which says whether the young campaigns' vectors are the gap;
* ``campaign_end``: the share of the horizon the campaign is still live (lifetimes are
  exponential, so no log predicts the end beyond the popularity it depends on);
* ``ramp``: the campaign's mean delivery ramp over the horizon (known from its launch);
* ``popularity``, ``rate``: the item's true popularity and the user's true requests per day;

and facts a log-based system could estimate:

* ``true_vector_query``: the user's 6-hour decayed mean of the true vectors of the items they
  were scored on . the item's true vector (the short query of ``recent.py`` with perfect item
  embeddings);
* ``request_ppmi_query``: the same query on item embeddings from the logs: the positive PMI of
  items scored in the same request, its top-24 eigenvectors (dense items x items: a benchmark,
  not a product path);
* ``logged_rate``: the user's requests per day since first seen.

Each variant is fitted in-sample (the scored candidates' own future rows as labels, the same
weighted logistic regression as ``scorer_replay.py``), so the figures measure information, not a
deployable model; the in-sample floor is the comparison. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds


def _sibling(name: str):
    """The benchmark script ``name``.py next to this one, as a module (sys.path untouched, so
    these scripts' names, ``load`` or ``simulate``, never shadow anything)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


replay = _sibling("scorer_replay")
log = logging.getLogger("oracle_features")
SHORT_HALF_LIFE_H = 6.0
PPMI_RANK = 24


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True).clip(1e-12)


def _history(logs: str, cutoff) -> pd.DataFrame:
    """Log rows before the cutoff with their age in hours at the cutoff."""
    dataset = ds.dataset(logs, format="parquet", partitioning="hive", exclude_invalid_files=True)
    before = ds.field("ts") < pa.scalar(cutoff.to_pydatetime(), dataset.schema.field("ts").type)
    frame = dataset.to_table(columns=["request_id", "user_id", "item_id", "ts"],
                             filter=before).to_pandas()
    frame["age_h"] = (cutoff - frame.ts).dt.total_seconds() / 3600.0
    return frame


def _query_feature(history, item_vectors, item_index, cand) -> np.ndarray:
    """Per candidate: unit(6-hour decayed mean of the user's item vectors) . unit(item vector).
    ``item_vectors`` (n, d) indexed by ``item_index`` (pd.Index of item ids)."""
    vectors = _unit(item_vectors)
    users = pd.Index(np.unique(history.user_id))
    rows = users.get_indexer(history.user_id)
    weight = np.exp(-np.log(2) * history.age_h.to_numpy() / SHORT_HALF_LIFE_H)
    queries = np.zeros((len(users), vectors.shape[1]))
    np.add.at(queries, rows, vectors[item_index.get_indexer(history.item_id)] * weight[:, None])
    user_row = users.get_indexer(cand.user_id)
    item_row = item_index.get_indexer(cand.item_id)
    known = (user_row >= 0) & (item_row >= 0)
    feature = np.zeros(len(cand))
    feature[known] = np.einsum("rd,rd->r", _unit(queries)[user_row[known]], vectors[item_row[known]])
    return feature


def _request_ppmi(history) -> tuple[np.ndarray, pd.Index]:
    """Item embeddings (items, PPMI_RANK): eigenvectors of the positive PMI of items scored in
    the same request, scaled by the root of their eigenvalues."""
    items = pd.Index(np.unique(history.item_id))
    requests = pd.Index(np.unique(history.request_id))
    member = np.zeros((len(requests), len(items)), np.float32)
    member[requests.get_indexer(history.request_id), items.get_indexer(history.item_id)] = 1.0
    counts = (member.T @ member).astype(np.float64)
    del member
    margin = counts.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(counts * counts.sum() / np.outer(margin, margin))
    values, vectors = np.linalg.eigh(np.where(np.isfinite(pmi) & (pmi > 0), pmi, 0.0))
    top = np.argsort(-values)[:PPMI_RANK]
    return vectors[:, top] * np.sqrt(np.maximum(values[top], 0.0)), items


def _horizon_means(sim, hours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item (all of ``sim.items``): the share of ``hours`` it is live, and its mean delivery
    ramp over them as if it never ended (the simulator's ``delivery_weight``)."""
    from solaris_lib.simulate.requests import delivery_weight

    items = sim.items
    endless = dataclasses.replace(items, end_hour=np.full_like(items.end_hour, hours.max() + 1))
    live = np.mean([(items.end_hour > h) for h in hours], axis=0)
    ramp = np.mean([delivery_weight(sim.cfg, endless, int(h)) for h in hours], axis=0)
    return live, ramp


def oracle_columns(cand, sim, first_day: int, horizon_h: int, history) -> dict[str, list]:
    """Add the oracle and log-based columns to ``cand``; returns the variants (name -> columns)."""
    users, items = sim.users, sim.items
    u = pd.Index(users.user_id).get_indexer(cand.user_id)
    i = pd.Index(items.item_id).get_indexer(cand.item_id)
    cand["o_aff"] = np.einsum("rd,rd->r", users.interest[u], items.vector[i])
    cand["o_draw"] = np.exp(sim.cfg.interest_temperature * cand["o_aff"])
    live, ramp = _horizon_means(sim, first_day * 24 + np.arange(horizon_h))
    cand["o_live"] = live[i]
    cand["o_ramp"] = np.log(np.maximum(ramp, 1e-4))[i]
    young = (first_day * 24 - items.start_hour[i] < sim.cfg.ramp_up_hours).astype(np.float64)
    cand["o_young"] = young  # still ramping up at the cutoff
    cand["o_aff_young"] = young * cand["o_aff"]
    cand["o_aff_old"] = (1.0 - young) * cand["o_aff"]
    cand["o_pop"] = np.log(items.popularity[i])
    cand["o_rate"] = np.log(users.rate_per_day[u])
    cand["q_true"] = _query_feature(history, items.vector, pd.Index(items.item_id), cand)
    embeddings, index = _request_ppmi(history)
    cand["q_ppmi"] = _query_feature(history, embeddings, index, cand)
    per_user = history.groupby("user_id").agg(n=("request_id", "nunique"), age=("age_h", "max"))
    rate = np.log(per_user.n / per_user.age.clip(lower=6.0) * 24.0)
    cand["l_rate"] = cand.user_id.map(rate).fillna(float(rate.min())).to_numpy()
    return {"affinity": ["o_aff", "o_draw"], "affinity_young_items": ["o_aff_young", "o_young"],
            "affinity_older_items": ["o_aff_old", "o_young"], "campaign_end": ["o_live"],
            "ramp": ["o_ramp"],
            "popularity": ["o_pop"], "rate": ["o_rate"],
            "all_oracle": ["o_aff", "o_draw", "o_live", "o_ramp", "o_pop", "o_rate"],
            "true_vector_query": ["q_true"], "request_ppmi_query": ["q_ppmi"],
            "logged_rate": ["l_rate"], "request_ppmi_query+logged_rate": ["q_ppmi", "l_rate"]}


def main(argv: list[str] | None = None) -> int:
    from solaris_lib.intervals import parse_duration, parse_timestamp
    from solaris_lib.speculation.evaluate import GLOBAL_USER_CAP
    from solaris_lib.speculation.scorer import FEATURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="folder given to --dump-candidates")
    parser.add_argument("--logs", required=True, help="the simulated world the dump was run on")
    parser.add_argument("--cutoff", required=True)
    parser.add_argument("--horizon", default="7d")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: "
                        "all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    started = time.monotonic()
    cutoff = parse_timestamp(args.cutoff)
    sim, first_day = _sibling("speculation_ceiling").simulator_at(args.logs, cutoff)
    _, cand, budgets = replay.load(Path(args.dump))
    history = _history(args.logs, pd.Timestamp(cutoff))
    horizon_h = int(parse_duration(args.horizon).total_seconds() // 3600)
    variants = oracle_columns(cand, sim, first_day, horizon_h, history)
    log.info("oracle columns for %d candidates in %.0f s", len(cand), time.monotonic() - started)
    rows = cand["rows"].to_numpy(np.float64)

    def in_sample(features: list[str]) -> dict:
        x = replay.design(cand, features, [])
        return replay.coverage(cand, replay.logistic_scores(x, rows, x), budgets,
                               GLOBAL_USER_CAP)

    floor = in_sample(list(FEATURES))
    result = {"benchmark": "oracle_features", "candidates": len(cand),
              "spark": replay.coverage(cand, cand["score"].to_numpy(np.float64), budgets,
                                       GLOBAL_USER_CAP),
              "perfect": replay.coverage(cand, cand["rows"].to_numpy(np.float64), budgets,
                                         GLOBAL_USER_CAP),
              "floor_in_sample": floor, "variants": {},
              "corr_with_true_affinity": {
                  f: round(float(np.corrcoef(cand[f], cand["o_aff"])[0, 1]), 3)
                  for f in ("als", "recent_sim", "recent_sim_short", "audience_sim", "choice",
                            "choice_sim_short", "q_true", "q_ppmi")}}
    log.info("floor (in sample): %s", floor)
    chosen = [v for v in args.variants.split(",") if v] or list(variants)
    for name, columns in ((n, variants[n]) for n in chosen):
        figures = in_sample(list(FEATURES) + columns)
        figures["ratio_global"] = round(figures["global"] / floor["global"], 4)
        result["variants"][name] = figures
        log.info("%-32s %s", name, figures)
    result["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
