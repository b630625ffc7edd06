"""What a publish takes and what it reports: :class:`PublishConfig` (typed, unknown keys
rejected) and :class:`PublishReport` (printed as JSON by the job). See :mod:`publish`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator

from solaris_lib.cache.errors import CacheFormatError
from solaris_lib.cache.format import check_buckets


class PublishConfig(BaseModel):
    """Knobs of one publish; unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_s: int | None = Field(None, gt=0, description="Seconds the version's keys live after "
                              "they are written; default three interval lengths.")
    buckets: int = Field(4, description="Hashes per user for its exact items (a power of two "
                         "up to 64): about one per 64 pairs of a typical user keeps every hash "
                         "a short listpack under infra/redis.conf (docs/cache-format.md).")
    partitions: int | None = Field(None, ge=1, description="Spark tasks reading and writing "
                                   "(parallel writers); default the session's parallelism.")
    verify_sample: int = Field(64, ge=1, description="Pairs read back and compared with the "
                               "input after the write.")
    pipeline_bytes: int = Field(1 << 20, ge=1024, description="Bytes per pipelined send.")
    write_timeout_s: float = Field(60.0, gt=0, description="Timeout of one pipelined send.")
    force: bool = Field(False, description="Switch the alias even when it names a later "
                        "interval (backfills normally leave it).")
    retire_after_s: int = Field(600, gt=0, description="Seconds a retired version (neither "
                                "served nor failover any more) stays readable after a switch, "
                                "for clients that have not refreshed yet.")

    @field_validator("buckets")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        try:
            return check_buckets(value)
        except CacheFormatError as exc:  # a ValueError makes it a ValidationError
            raise ValueError(str(exc)) from exc


@dataclass
class PublishReport:
    """What a publish did (the job prints it as JSON)."""

    status: str  # published | already_served | superseded
    version: str
    served_version: str | None
    previous_version: str | None
    model_version: str
    dim: int
    buckets: int
    rows_read: int
    pairs: int = 0
    users: int = 0
    keys: int = 0
    duplicates: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    estimate_bytes: int = 0
    listpack_keys: int = 0
    ttl_s: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    # the hierarchical fallback level (all zero / empty when the interval has none)
    cluster_pairs: int = 0
    clusters: int = 0
    item_clusters: int = 0
    cluster_duplicates: int = 0
    cluster_dropped: dict[str, int] = field(default_factory=dict)
    # the failover tier (solaris_lib/cache/retain.py) and the eviction check
    failover_version: str | None = None
    retained: dict = field(default_factory=dict)
    eviction_policy: dict[str, str] = field(default_factory=dict)
    evicted_keys: int = 0

    def as_dict(self) -> dict:
        return asdict(self)
