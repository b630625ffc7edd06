"""Typed knobs of the speculation stages (frozen; unknown keys rejected)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from solaris_lib.errors import ConfigError, validation_problems

SOURCES = ("repeat", "faiss", "item_faiss", "cooccurrence", "popular", "miss")


class MineConfig(BaseModel):
    """What ``mine`` computes over ``[end - lookback, end)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lookback: timedelta = Field(timedelta(days=28), description="History window before the end.")
    max_history: int = Field(200, ge=1, description="Newest events kept per user history.")
    max_history_clicks: int = Field(
        100, ge=0, description="Newest clicked events kept per user history besides those "
        "(the clicks among the newest max_history count toward it).")
    half_life: timedelta = Field(
        timedelta(days=3), gt=timedelta(0), description="Half-life of the time-decayed pair and item counts."
    )
    recent_half_life: timedelta = Field(
        timedelta(hours=6), gt=timedelta(0), description="Half-life of the pairs' short-memory decayed count "
        "(pair_stats.recent_decayed): the user's current interest (recent.py)."
    )
    trend_window: timedelta = Field(
        timedelta(days=1), gt=timedelta(0), description="Recent window whose rate, over the lookback's, is the trend."
    )
    short_window: timedelta = Field(
        timedelta(days=7), description="Window of item_stats.short_rows: the rows of the last "
        "days, one of the popularity measures the popular source may rank by."
    )
    cooc_items_per_user: int = Field(
        40, ge=1, description="A user's most-scored items that enter co-occurrence counting."
    )
    cooc_top_n: int = Field(20, ge=1, description="Neighbours kept per item in co-occurrence.")


class RetrievalConfig(BaseModel):
    """ALS (implicit feedback) over the lookback window."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lookback: timedelta = Field(timedelta(days=28), description="Training window before the end.")
    rank: int = Field(32, ge=2, description="Factor dimension.")
    max_iter: int = Field(10, ge=1, description="ALS sweeps.")
    reg: float = Field(0.1, ge=0, description="L2 regularisation.")
    alpha: float = Field(
        10.0, gt=0, description="Confidence scale of implicit counts (with reg, it decides how "
        "well the item factors place items: docs/speculation.md, oracle features)."
    )
    seed: int = Field(7, description="Seed of ALS's initial factors (and of the choice model's).")
    pairs_per_block: int = Field(
        100_000, ge=1, description="ALS: rated pairs per user and per item block (2 to 1,000 "
        "blocks, from the data, not the cluster's size: the initial factors are drawn per block)."
    )
    choice: bool = Field(
        True, description="Also fit the choice model (:mod:`choice`): item vectors whose "
        "softmax over the catalogue explains which items each user was scored on."
    )
    choice_dim: int = Field(16, ge=2, description="Choice model: vector dimension.")
    choice_reg: float = Field(
        0.02, ge=0, description="Choice model: L2 penalty on the mean squared norm of the user "
        "and of the item vectors (added to the mean negative log-likelihood per row)."
    )
    choice_steps: int = Field(300, ge=1, description="Choice model: full-batch Adam steps.")
    choice_lr: float = Field(0.1, gt=0, description="Choice model: Adam learning rate.")
    choice_half_life: timedelta = Field(
        timedelta(hours=72), gt=timedelta(0), description="Choice model: half-life of a row's weight by its age "
        "at the window's end (interests drift)."
    )
    choice_chunk_cells: int = Field(
        1 << 24, ge=1, description="Choice model: most user x item logits in memory at once "
        "(users are processed in chunks of this many cells; gradients add over chunks)."
    )
    choice_full_items: int = Field(
        100_000, ge=1, description="Choice model: catalogues up to this many items use the full "
        "softmax; larger ones a sampled softmax over choice_negatives items per step."
    )
    choice_negatives: int = Field(
        4096, ge=1, description="Choice model, sampled softmax: items drawn per step (by their "
        "row weight^0.75, shared by all users of the step) to estimate each user's softmax "
        "normaliser."
    )


class SpeculateConfig(BaseModel):
    """Candidate sources, the scorer and the budgets of ``speculate``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget_per_user: int = Field(200, ge=1, description="Most pairs kept per user.")
    global_budget: int | None = Field(
        None, ge=1, description="Most pairs kept in total (highest scores win); None: no cap."
    )
    max_per_user: int = Field(
        0, ge=0, description="Most pairs one user keeps, for a global budget that shares the "
        "total by score across users; 0: budget_per_user. The candidate pools stay sized by "
        "budget_per_user either way."
    )
    sources: tuple[Literal[SOURCES], ...] = Field(SOURCES, description="Candidate sources to use.")
    faiss_k: int = Field(
        0, ge=0, description="Nearest live items per user from each FAISS source (faiss, "
        "item_faiss); 0: budget."
    )
    exact_threshold: int = Field(
        50_000, ge=1, description="Live catalogues up to this size use exact IndexFlatIP; above, IVF."
    )
    popular_n: int = Field(
        0, ge=0, description="Popular items offered to every user; 0: budget_per_user."
    )
    popular_by: tuple[Literal["decayed", "short", "lookback"], ...] = Field(
        ("lookback", "short", "decayed"), min_length=1, description="Popularity measures the "
        "popular source may rank by (popular.MEASURES): the first (the textbook counts over the "
        "window), unless another's lists covered a labelled previous interval clearly better "
        "(popular.choose_measure)."
    )
    cooc_per_user: int = Field(
        0, ge=0, description="Co-occurrence candidates kept per user; 0: budget_per_user."
    )
    live_window: timedelta = Field(
        timedelta(days=2), description="Items seen within this window before the end are live."
    )
    live_gaps: float = Field(
        3.0, ge=0, description="An item also stays live for this many of its own mean gaps "
        "between rows after it was last seen (sporadic items, e.g. films in a ratings log); "
        "0: live_window alone."
    )
    live_tail_share: float = Field(
        0.02, ge=0, lt=1, description="With a labelled previous interval, live_window widens to "
        "the silence beyond which items carried at most this share of that interval's rows "
        "(sparse logs whose items come back after weeks); 0: live_window as given."
    )
    scorer: str = Field(
        "auto", pattern="^(auto|learned|heuristic|repeat|popular|faiss|item_faiss|cooccurrence)$",
        description="auto: with a labelled previous interval, the ranking (learned scorer, "
        "heuristic or one source's own, selection.RANKINGS) that covered most of it, else the "
        "heuristic; a ranking's name: that ranking (learned: when a labelled interval exists)."
    )
    validation_max_candidates: int = Field(
        4_000_000, ge=1, description="Most labelled candidates the rankings are validated on "
        "(collected to the driver, about 80 bytes each); beyond, a hash sample of users."
    )
    seed: int = Field(7, description="Seed of the scorer's sampling and of FAISS training.")

    def fits_scorer(self) -> bool:
        """Whether a run with a labelled previous interval fits the learned scorer (``auto``
        validates it beside the other rankings)."""
        return self.scorer in ("auto", "learned")

    def uses_factors(self) -> bool:
        """Whether a run needs retrieval factors: a FAISS source, or a learned scorer (whose
        features include the factors' scores)."""
        return self.fits_scorer() or bool({"faiss", "item_faiss"} & set(self.sources))

    def user_cap(self) -> int:
        """Most pairs kept per user (the selection cap, not the candidate pool size):
        ``max_per_user`` with a global budget, else ``budget_per_user``."""
        if self.max_per_user and self.global_budget is not None:
            return self.max_per_user
        return self.budget_per_user

    def popular_count(self) -> int:
        return self.popular_n or self.budget_per_user

    def faiss_count(self) -> int:
        return self.faiss_k or self.budget_per_user

    def cooc_count(self) -> int:
        return self.cooc_per_user or self.budget_per_user


def mine_config(**fields) -> MineConfig:
    """:class:`MineConfig` from job flags, with a :class:`ConfigError` that names each bad
    field instead of pydantic's traceback."""
    try:
        return MineConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(f"invalid mine settings ({validation_problems(exc)})") from exc


def retrieval_config(**fields) -> RetrievalConfig:
    """:class:`RetrievalConfig` from job flags (``jobargs.retrieval_overrides``), with a
    :class:`ConfigError` that names each bad field instead of pydantic's traceback."""
    try:
        return RetrievalConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(f"invalid retrieval settings ({validation_problems(exc)})") from exc


def speculate_config(**fields) -> SpeculateConfig:
    """:class:`SpeculateConfig` from job flags or settings, with a :class:`ConfigError` that
    names each bad field (``live_gaps: Input should be greater than or equal to 0``) instead of
    pydantic's traceback."""
    try:
        return SpeculateConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(f"invalid speculate settings ({validation_problems(exc)})") from exc
