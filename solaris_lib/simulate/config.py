"""Parameters of the simulated ad-request world (frozen; unknown keys rejected)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator


class WorldConfig(BaseModel):
    """Everything that shapes a simulated world; the same config and seed give the same logs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: int = Field(2000, ge=1, description="Users over the whole period (some join late).")
    items: int = Field(5000, ge=10, description="Size of the live catalogue in steady state.")
    days: int = Field(14, ge=1, description="Days of logs to write.")
    seed: int = Field(7, ge=0, description="Seed of every random draw.")
    start: datetime = Field(
        datetime(2026, 1, 5, tzinfo=UTC), description="UTC midnight of the first day."
    )
    candidates_per_request: int = Field(50, ge=5, description="K: items the ranker scores.")
    shown_per_request: int = Field(8, ge=1, description="Top items shown (position 0..S-1).")
    mean_requests_per_user_day: float = Field(2.0, gt=0, description="Mean activity (req/day).")
    activity_sigma: float = Field(
        1.4, ge=0, description="Log-normal sigma of per-user activity: the heavy tail."
    )
    max_requests_per_user_day: float = Field(80.0, gt=0, description="Cap of a user's rate.")
    late_user_share: float = Field(
        0.25, ge=0, le=1, description="Share of users whose first visit is after day 0."
    )
    latent_dim: int = Field(16, ge=2, description="Dimension of interests and item vectors.")
    categories: int = Field(24, ge=2, description="Item categories (related items).")
    mean_campaign_days: float = Field(
        15.0, gt=0.5, description="Mean campaign lifetime over campaigns (1/turnover per day)."
    )
    popularity_alpha: float = Field(
        1.2, gt=0.3, description="Pareto exponent of campaign popularity (Zipf-like ranks)."
    )
    lifetime_popularity_power: float = Field(
        0.9, ge=0, description="Popular campaigns run longer: lifetime ~ popularity^power."
    )
    ramp_up_hours: float = Field(
        240.0, ge=0, description="New campaigns deliver slowly at first (pacing): their weight "
        "grows linearly over this many hours."
    )
    interest_pool: int = Field(150, ge=10, description="Items a user's retrieval draws from.")
    interest_temperature: float = Field(4.0, gt=0, description="Sharpness of interest picks.")
    interest_popularity_power: float = Field(
        0.3, ge=0, description="Bigger campaigns are delivered more within interests too."
    )
    mix_interest: float = Field(0.86, ge=0, le=1, description="Share of interest candidates.")
    mix_popular: float = Field(0.12, ge=0, le=1, description="Share of popular candidates.")
    drift_per_day: float = Field(0.08, ge=0, description="Daily random walk of interests.")
    click_base_logit: float = Field(-4.6, description="Click logit of an average pair.")
    click_affinity: float = Field(2.0, description="Weight of user-item affinity on the logit.")
    click_quality: float = Field(0.5, description="Weight of the item's quality.")
    click_excitation: float = Field(
        2.0, description="Logit boost (saturating) from recent clicks on the same category."
    )
    excitation_half_life_hours: float = Field(6.0, gt=0, description="Decay of that boost.")
    session_requests: float = Field(
        0.0, ge=0, description="Mean requests of a session (bursty short sessions: a user's "
        "requests come in bursts within one hour, sessions at rate / this per hour); 0: every "
        "request independent (the default world's draws)."
    )

    @model_validator(mode="after")
    def _check(self) -> WorldConfig:
        if self.mix_interest + self.mix_popular > 1:
            raise ValueError("mix_interest + mix_popular must be <= 1 (the rest is exploration)")
        if self.items < 4 * self.candidates_per_request:
            raise ValueError(
                f"items ({self.items}) must be at least 4x candidates_per_request "
                f"({self.candidates_per_request}) so that every request finds distinct candidates"
            )
        if self.shown_per_request > self.candidates_per_request:
            raise ValueError("shown_per_request cannot exceed candidates_per_request")
        if self.start.tzinfo is None or self.start.utcoffset().total_seconds() != 0:
            raise ValueError("start must be a UTC timestamp")
        if (self.start.hour, self.start.minute, self.start.second) != (0, 0, 0):
            raise ValueError("start must be a UTC midnight")
        return self

    @property
    def mix_explore(self) -> float:
        return 1.0 - self.mix_interest - self.mix_popular
