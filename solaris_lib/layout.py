"""Where every dataset lives under the data root: one place, so all stages agree.

``<root>/logs/dt=YYYY-MM-DD/hour=HH/*.parquet``      request logs (the contract, see ``logs.schema``)
``<root>/logs/_quarantine/...``                       rows a reader refused, with the reason
``<root>/<stage>/interval=<key>/``                    each stage's output for one data interval
``<root>/<stage>/<table>/interval=<key>/``            one of the stage's tables, e.g. the
                                                      fallback levels' tables beside the embeddings
``<models_root>/<model>/v=<version>/``                versioned model artefacts

Paths are strings so that a URI root (``hdfs://``) works unchanged on a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from solaris_lib.intervals import Interval

if TYPE_CHECKING:  # pydantic, 0.3 s: not for the executors' readers that import this module
    from solaris_lib.config import SolarisSettings

MINED = "mined"
RETRIEVAL = "retrieval"
SPECULATED = "speculated"
EMBEDDINGS = "embeddings"
CACHE = "cache"
EVALUATION = "evaluation"
QUARANTINE_DIRNAME = "_quarantine"
# The fallback levels' tables of an interval, under EMBEDDINGS (solaris_lib.fallback writes them,
# the cache publisher reads them): (user, item cluster) embeddings, the item -> cluster table and
# the item priors.
CLUSTER_EMBEDDINGS = "cluster"
ITEM_CLUSTERS = "item_clusters"
ITEM_PRIORS = "item_prior"


def join(*parts: str) -> str:
    """Join path or URI segments with single slashes."""
    head, *rest = parts
    out = head.rstrip("/")
    for part in rest:
        out = f"{out}/{part.strip('/')}"
    return out


@dataclass(frozen=True)
class DataLayout:
    """Resolves dataset locations under one data root."""

    root: str
    models_root: str

    @classmethod
    def from_settings(cls, settings: SolarisSettings) -> DataLayout:
        return cls(root=settings.data_root, models_root=settings.models_root)

    @property
    def logs(self) -> str:
        return join(self.root, "logs")

    @property
    def quarantine(self) -> str:
        return join(self.logs, QUARANTINE_DIRNAME)

    def stage_root(self, stage: str) -> str:
        return join(self.root, stage)

    def output(self, stage: str, interval: Interval, table: str | None = None) -> str:
        """The partition a stage writes for ``interval`` (optionally one of several tables)."""
        base = self.stage_root(stage) if table is None else join(self.stage_root(stage), table)
        return join(base, f"interval={interval.key}")

    def model(self, name: str) -> str:
        return join(self.models_root, name)
