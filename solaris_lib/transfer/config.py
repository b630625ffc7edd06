"""Typed knobs of the transfer experiment (frozen; unknown keys rejected).

Time line of one experiment over logs ``[first day, end)``::

    [ FM training ........ )[ ranker training: ranker_days )[ held-out test: test_days )
                           ^ split                          ^ test_start               ^ end

Both the ranker periods are cut into consecutive intervals of ``interval`` (e.g. 6 h); interval
``t`` is served from the cache of the speculation run for ``t - 1``.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from solaris_lib.fallback import Level

VARIANTS = ("plain", "distilled", "solaris", "solaris_hit_only", "solaris_embedding_only",
            "solaris_fallback")
LEVELS = tuple(level.name.lower() for level in (Level.EXACT, Level.CLUSTER, Level.ITEM,
                                                Level.MISS))  # the report's keys, finest first


class RankerConfig(BaseModel):
    """The small online ranker (every variant uses the same settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id_dim: int = Field(16, ge=4, le=64, description="Width of the hashed user and item embeddings.")
    buckets: int = Field(1 << 16, ge=64, description="Rows of each hashed id table.")
    hidden: int = Field(64, ge=4, description="Width of the MLP's hidden layer.")
    epochs: int = Field(6, ge=1, description="Most epochs; the best on validation is kept.")
    batch: int = Field(1024, ge=16, description="Rows per Adam step.")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    l2: float = Field(1e-4, ge=0, description="L2 penalty on the id rows used in a batch.")
    validation: float = Field(0.15, gt=0, lt=0.5,
                              description="Newest share of training rows used for early stopping.")
    distill_weight: float = Field(
        0.5, ge=0, le=1,
        description="Distilled target = w * FM probability + (1 - w) * click label.")
    seed: int = Field(0, description="Seed of initialisation and batch order.")


class TransferConfig(BaseModel):
    """The whole experiment: periods, speculation budget, fallback, FM and ranker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: timedelta = Field(timedelta(hours=6), description="Length of one cache interval.")
    ranker_days: float = Field(2.0, gt=0, description="Days of ranker training rows.")
    test_days: float = Field(1.0, gt=0, description="Held-out days at the end of the logs.")
    lookback: timedelta = Field(timedelta(days=7),
                                description="History mined by each speculation run.")
    budget_per_user: int = Field(200, ge=1, description="Pairs speculated per user and interval.")
    scorer: str = Field("auto", pattern="^(auto|learned|heuristic)$",
                        description="Speculation scorer (SpeculateConfig.scorer); heuristic skips "
                        "training the learned one on the previous interval (faster).")
    activity_window: timedelta = Field(
        timedelta(days=7), description="Window of the user-activity feature (events before start).")
    popularity_window: timedelta = Field(
        timedelta(days=1), description="Window of the item-popularity feature (rows before start).")
    clusters: int = Field(32, ge=2, description="k-means item clusters over the ALS item factors "
                          "(the infer job's SOLARIS_FALLBACK_CLUSTERS).")
    fm_model: str = Field("foundation", pattern="^(foundation|two_tower)$",
                          description="Which shipped model of the contract is the FM.")
    fm_preset: str = Field("small", description="Foundation model preset (solaris_lib.model).")
    fm_epochs: int | None = Field(
        None, ge=1, description="Most foundation model epochs (None: the preset's; early "
        "stopping keeps the best validation epoch).")
    fm_days: float | None = Field(
        None, gt=0, description="Train the FM on this many days before the ranker period only "
        "(None: every day before it); a CPU budget knob.")
    threads: int = Field(2, ge=1, description="torch threads.")
    seed: int = Field(7, description="Seed of the FM, retrieval and speculation.")
    ranker: RankerConfig = Field(default_factory=RankerConfig)

    def ranker_span(self) -> timedelta:
        return timedelta(days=self.ranker_days)

    def test_span(self) -> timedelta:
        return timedelta(days=self.test_days)
