"""Which ranking a run keeps: each candidate ranking scored on the latest labelled interval.

A ranking orders a subset of the candidates by a score (:data:`RANKINGS`):

============ ======================================================================================
learned      every candidate by the learned scorer (validated out of fold, see :func:`validate`)
heuristic    every candidate by the documented heuristic, a blend of the sources
repeat       the user's window pairs by their decayed count
popular      the popular source's items by the user's decayed requests x the item's popularity
             measure (per user: the textbook list, the most popular items new to the user)
faiss        the user's ``faiss_count()`` nearest live items by the inner product the faiss source
             searched (``choice``, or ``als`` without choice vectors), own pairs included
             (FAISS pool and window pairs)
item_faiss   the same by the recent-interest query's cosine (``recent_sim``)
cooccurrence the co-occurrence source's items by their score
============ ======================================================================================

A run that has a labelled previous interval applies every ranking to that interval's
candidates with the run's budgets and counts the rows each one's selection would have covered.
It keeps the textbook popularity list unless another ranking covered clearly more (beyond the
noise of the rows where the two selections differ, :func:`choose`), and then the one of those
that covered most. So a run is never knowingly worse than its best single source, and where
the labelled interval is too small to tell the rankings apart (a sparse ratings log), it ranks
by popularity, the baseline that holds up on such logs.

The selection mirrors :func:`scorer.apply_budgets` exactly (per user: score descending, then
item id; overall: score descending, user id, item id) in numpy on the driver, on at most
``SpeculateConfig.validation_max_candidates`` candidates (a hash sample of users beyond it).
``speculation-eval`` scores its single-source baselines with the same rankings.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from solaris_lib.speculation import scorer
from solaris_lib.speculation.candidates import faiss_score, has_source
from solaris_lib.speculation.config import SpeculateConfig

log = logging.getLogger(__name__)

RANKINGS = ("learned", "heuristic", "repeat", "popular", "faiss", "item_faiss", "cooccurrence")
SINGLE_SOURCES = ("repeat", "popular", "faiss", "item_faiss", "cooccurrence")


@dataclass(frozen=True)
class Budget:
    """The selection rule: each user's ``per_user`` best, then the ``total`` best overall."""

    per_user: int
    total: int | None = None

    def scaled(self, users: int, of_users: int) -> Budget:
        """The same rule for ``users`` users where this one was set for ``of_users``: the
        total scales with the users (the per-user cap does not)."""
        if self.total is None:
            return self
        return Budget(self.per_user, max(1, round(self.total * users / max(of_users, 1))))


def ranking_scores(features, faiss_by: str):
    """``features`` plus ``score_<ranking>`` for every single-source ranking and the heuristic
    (null where the ranking does not hold the pair); the faiss ranking orders by the feature
    ``faiss_by`` (:func:`candidates.faiss_feature`) as the pools were searched
    (:func:`candidates.faiss_score`). Needs
    :data:`scorer.FEATURES`, ``heuristic``, ``source_flags`` and ``popular_score``."""
    from pyspark.sql import functions as F

    tagged = has_source
    requests = F.exp(F.col("user_act")) - 1.0
    own = tagged("repeat")
    columns = {
        "heuristic": F.col("heuristic"),
        "repeat": F.when(own, F.col("pair_decayed")),
        "popular": F.when(tagged("popular"), requests * F.col("popular_score")),
        "faiss": F.when(tagged("faiss") | own, faiss_score(faiss_by)),
        "item_faiss": F.when(tagged("item_faiss") | own, F.col("recent_sim")),
        "cooccurrence": F.when(tagged("cooccurrence"), F.col("cooc")),
    }
    return features.select("*", *[c.cast("double").alias(f"score_{n}") for n, c in columns.items()])


def pools(faiss_count: int) -> dict[str, int]:
    """Per-user depth of the rankings that have one: the FAISS rankings hold the user's
    ``faiss_count`` nearest items, their own window pairs included, as a FAISS source alone
    would."""
    return {"faiss": faiss_count, "item_faiss": faiss_count}


def select(user: np.ndarray, item: np.ndarray, score: np.ndarray, budget: Budget) -> np.ndarray:
    """Boolean mask of the pairs :func:`scorer.apply_budgets` keeps; NaN scores are never kept.

    ``user``, ``item``: (n,) int64; ``score``: (n,) float64."""
    keep = ~np.isnan(score)
    index = np.flatnonzero(keep)
    order = index[np.lexsort((item[index], -score[index], user[index]))]
    users = user[order]
    starts = np.r_[0, np.flatnonzero(users[1:] != users[:-1]) + 1]
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    kept = order[rank < budget.per_user]
    if budget.total is not None and len(kept) > budget.total:
        best = np.lexsort((item[kept], user[kept], -score[kept]))
        kept = kept[best[: budget.total]]
    mask = np.zeros(len(score), bool)
    mask[kept] = True
    return mask


def per_user_rank(user: np.ndarray, item: np.ndarray, score: np.ndarray) -> np.ndarray:
    """(n,) each pair's rank within its user by ``score`` (1 = best; ties: smaller item id);
    0 where the score is NaN."""
    rank = np.zeros(len(score), np.int64)
    index = np.flatnonzero(~np.isnan(score))
    order = index[np.lexsort((item[index], -score[index], user[index]))]
    users = user[order]
    starts = np.r_[0, np.flatnonzero(users[1:] != users[:-1]) + 1]
    rank[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)])) + 1
    return rank


@dataclass(frozen=True)
class Validation:
    """What each ranking covered on the labelled interval and which one the run keeps."""

    selected: str
    coverage: dict[str, float]  # ranking -> share of the interval's known-user rows covered
    margins: dict[str, float]  # ranking -> rows over the default (popular), in noise units
    users: int  # users validated on (all known users, or a sample)
    candidates: int

    def report(self) -> dict:
        return {"selected": self.selected, "coverage": self.coverage, "margins": self.margins,
                "users": self.users, "candidates": self.candidates}


def selections(frame, budget: Budget, names, faiss_count: int) -> tuple[np.ndarray, dict]:
    """(rows (n,), {ranking: (n,) bool mask of the pairs its selection keeps}): ``frame``
    (pandas) holds user_id, item_id, ``rows`` and a ``score_<name>`` per name (NaN: not in
    the ranking)."""
    user = frame["user_id"].to_numpy(np.int64)
    item = frame["item_id"].to_numpy(np.int64)
    depth = pools(faiss_count)
    masks = {}
    for name in names:
        score = frame[f"score_{name}"].to_numpy(np.float64)
        rule = Budget(min(budget.per_user, depth.get(name, budget.per_user)), budget.total)
        masks[name] = select(user, item, score, rule)
    return frame["rows"].to_numpy(np.float64), masks


def choose(rows: np.ndarray, masks: dict, total_rows: float) -> tuple[str, dict, dict]:
    """(kept ranking, {ranking: coverage}, {ranking: margin over the default}) from each
    ranking's selection.

    The default is the textbook list, ``popular`` (without it, the single source that covered
    most; ties: the earlier in :data:`RANKINGS`). Another ranking replaces it only when it
    covers clearly more: of the rows one selection covers and the other does not, its own
    exceed the default's by more than twice their noise, ``2 sqrt(b + c)``; its ``margin`` is
    that excess in those units. Of the rankings that clear it, the one that covered most is
    kept. On a sparse log a week holds a few hundred rows, and a plain maximum follows their
    noise (on the ratings shape it kept FAISS over popularity on a 4-row lead, and lost a third
    of the next week's rows); on an impression log the learned scorer clears it by dozens of
    units."""
    covered = {n: float(rows[m].sum()) for n, m in masks.items()}
    names = [n for n in RANKINGS if n in masks]
    coverage = {n: (covered[n] / total_rows if total_rows else 0.0) for n in names}
    singles = [n for n in names if n in SINGLE_SOURCES] or names
    default = "popular" if "popular" in masks else max(
        singles, key=lambda n: (covered[n], -names.index(n)))
    margins = {}
    for name in (n for n in names if n != default):
        own = float(rows[masks[name] & ~masks[default]].sum())
        other = float(rows[masks[default] & ~masks[name]].sum())
        margins[name] = (own - other) / max(2.0 * np.sqrt(own + other), 1.0)
    clear = [n for n, m in margins.items() if m > 1.0]
    best = max(clear, key=lambda n: (covered[n], -names.index(n))) if clear else default
    return best, coverage, margins


def rankings_of(config: SpeculateConfig, learned: bool) -> tuple[str, ...]:
    """The rankings a run with ``config`` may keep (the learned one only with a model)."""
    names = [n for n in RANKINGS if n in config.sources or n == "heuristic"]
    return tuple((["learned"] if learned else []) + names)


def validate(labelled, known, budget: Budget, config: SpeculateConfig,
             sample, faiss_by: str) -> Validation:
    """Score every ranking on the labelled previous interval and choose one.

    ``labelled``: that interval's candidates with features, ``rows`` and ``label``
    (:func:`scorer.label`); ``known``: (user_id, rows) of that interval's log rows of the users
    known then (the coverage denominator; every known user once, rows 0 when none);
    ``budget``: the run's selection rule scaled to those users; ``sample``: the learned
    scorer's training sample (:func:`scorer.training_sample`; None: no learned scorer), whose
    two halves of users give the out-of-fold scores; ``faiss_by``: see :func:`ranking_scores`.
    Beyond
    ``config.validation_max_candidates`` candidates a hash sample of users is validated, with
    the total budget scaled to it."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    names = rankings_of(config, sample is not None)
    frame = ranking_scores(scorer.out_of_fold(labelled, sample, config.seed)
                           if sample is not None else labelled, faiss_by)
    share = min(1.0, config.validation_max_candidates / max(labelled.count(), 1))
    everyone = known.count()
    if share < 1.0:
        bucket = F.abs(F.xxhash64("user_id", F.lit(config.seed + 1))) % 1_000_000
        frame = frame.filter(bucket < F.lit(int(share * 1_000_000)))
        known = known.filter(bucket < F.lit(int(share * 1_000_000)))
    local = frame.select("user_id", "item_id", "rows", *[f"score_{n}" for n in names]).toPandas()
    users, total = known.agg(F.count(F.lit(1)), F.sum("rows")).first()
    rule = budget.scaled(users, everyone)
    selected, coverage, margins = choose(*selections(local, rule, names, config.faiss_count()),
                                         float(total or 0))
    log.info("validated %d rankings on %d candidates of %d users in %.1f s: %s (margins over the "
             "default in noise units: %s); keeping %s", len(names), len(local), users,
             time.monotonic() - started, ", ".join(f"{n} {c:.4f}" for n, c in coverage.items()),
             ", ".join(f"{n} {m:+.1f}" for n, m in margins.items()), selected)
    return Validation(selected, coverage, margins, int(users), len(local))


def ranked_by(features, ranking: str, model):
    """``features`` (with :func:`ranking_scores`) with ``score``: the ranking's score, only the
    pairs it holds; the learned scorer's probability for ``learned``."""
    from pyspark.sql import functions as F

    if ranking == "learned":
        return scorer.score(features, model)
    return features.filter(F.col(f"score_{ranking}").isNotNull()).withColumn(
        "score", F.col(f"score_{ranking}"))


def user_cap(ranking: str, config: SpeculateConfig) -> int:
    """The per-user cap of ``ranking`` under ``config``: the run's, or the ranking's depth."""
    return min(config.user_cap(), pools(config.faiss_count()).get(ranking, config.user_cap()))
