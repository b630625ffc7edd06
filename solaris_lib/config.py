"""Deployment settings shared by every stage: where data lives and which services to use.

Read once at an entrypoint (CLI, spark-submit job, DAG task) from ``SOLARIS_*`` environment
variables; unknown ``SOLARIS_*`` variables are rejected so that a typo never silently falls back
to a default. Stage-specific knobs live in each stage's own typed config.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from solaris_lib.errors import ConfigError, validation_problems

# The model factories (``module:callable``) whose artefacts load by default: the foundation
# network and the two-tower model (solaris_lib.model.contract names them).
SHIPPED_FACTORIES: tuple[str, ...] = ("solaris_lib.model.network:foundation_net",
                                      "solaris_lib.model.two_tower:two_tower_net")

# data roots refused: no atomic directory rename (every stage publishes a partition by one)
OBJECT_STORES = ("s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "oss")


def parse_factories(value: str) -> tuple[str, ...]:
    """``"a.b:f, c.d:g"`` -> ``("a.b:f", "c.d:g")``; each entry must read ``module:callable``."""
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    for name in names:
        module, _, attr = name.partition(":")
        if not module or not attr or not all(p.isidentifier() for p in module.split(".")) \
                or not attr.isidentifier():
            raise ConfigError(f"model factory {name!r} does not read module:callable")
    return names


class SolarisSettings(BaseSettings):
    """Where SOLARIS keeps its data and which services it talks to."""

    model_config = SettingsConfigDict(env_prefix="SOLARIS_", extra="forbid", frozen=True)

    data_root: str = Field(
        default="var/data",
        description="Root of every dataset SOLARIS reads or writes: a local folder (on a "
        "cluster, one every node mounts) or an hdfs:// URI. Object stores (s3a://, gs://, ...) "
        "are refused: every stage publishes a partition by renaming its staging directory, "
        "which they cannot do atomically. Relative paths resolve against the working directory "
        "at load time.",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Redis holding the embedding cache: redis://, rediss:// (TLS), "
        "redis+cluster:// for Redis Cluster; user and password in the URL or from the "
        "environment, never in code.",
    )
    redis_key_prefix: str = Field(
        default="solaris",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Namespace of every key SOLARIS writes, so several deployments (or tests) "
        "share one Redis without touching each other.",
    )
    spark_master: str = Field(
        default="local[2]",
        description="Spark master for jobs started outside spark-submit (tests, CLI): local[N], "
        "spark://host:port, yarn or k8s://... spark-submit's own --master wins inside jobs.",
    )
    spark_local_memory: str = Field(
        default="2g",
        pattern=r"^[0-9]+[kmgt]?$",
        description="Memory of a local[N] session started outside spark-submit (CLI, tests, "
        "benchmarks): the driver's, which is all of Spark's there; e.g. 8g for "
        "speculation-eval on large logs.",
    )
    model_dir: str | None = Field(
        default=None,
        description="Folder of versioned model artefacts; defaults to <data_root>/models.",
    )
    log_level: str = Field(
        default="INFO",
        pattern=r"^(DEBUG|INFO|WARNING|ERROR)$",
        description="Level of SOLARIS's own log lines (progress, counts, rates).",
    )
    airflow_db_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of Airflow's metadata DB (PostgreSQL); SQLite under the "
        "data root when unset.",
    )

    airflow_port: int = Field(
        default=8080, ge=1, le=65535, description="Loopback port of the local Airflow API server/UI."
    )
    airflow_spark_slots: int = Field(
        default=2, ge=1,
        description="Slots of the local Airflow's solaris_spark pool: the Spark applications "
        "run at once; size it to what the Spark cluster holds (1 for a standalone cluster "
        "that fits one driver and its executor).",
    )
    interval: str = Field(
        default="1h",
        pattern=r"^\d+[mhdw]$",
        description="Length of a precompute data interval (the DAG's schedule): 15m, 1h, 1d...",
    )
    log_wait_timeout: str = Field(
        default="2h",
        pattern=r"^\d+[smhdw]$",
        description="How long the DAG waits for an interval's log partitions before failing.",
    )
    log_quiet_period: str = Field(
        default="10m",
        pattern=r"^\d+[smhdw]$",
        description="An hour partition without a _SUCCESS marker counts as complete once its "
        "newest file is this old (the log producer's contract, docs/pipeline.md).",
    )
    task_timeout: str = Field(
        default="2h",
        pattern=r"^\d+[smhdw]$",
        description="execution_timeout of every Spark task of the DAGs: a hung job is killed "
        "after this long and retried.",
    )
    dagrun_timeout: str = Field(
        default="12h",
        pattern=r"^\d+[smhdw]$",
        description="A DAG run still running after this long fails, so that with "
        "max_active_runs=1 one stuck run cannot hold back every later one.",
    )

    foundation_preset: str = Field(
        default="small",
        pattern=r"^(test|small|default|large)$",
        description="Size preset of the foundation model that training builds: test, small "
        "(trains on CPU in minutes), default (the benchmark size, too expensive to serve "
        "online; use a GPU), large.",
    )
    foundation_model: str = Field(
        default="foundation",
        pattern=r"^(foundation|two_tower)$",
        description="Which shipped model training builds: foundation (the target-aware "
        "sequence model, docs/model.md) or two_tower (two towers and a cross layer, "
        "docs/models.md). Inference serves whichever version is promoted.",
    )
    model_factories: str = Field(
        default=",".join(SHIPPED_FACTORIES),
        description="Comma-separated `module:callable` model factories that model artefacts "
        "may name in their manifest.json; an artefact naming another one is refused (a "
        "ConfigError). Default: the shipped models (the foundation model and the two-tower "
        "model). See docs/models.md.",
    )

    speculate_budget_per_user: int = Field(
        default=200, ge=1,
        description="Pairs the speculate task keeps per user for the next interval.",
    )
    speculate_global_budget: int | None = Field(
        default=None, ge=1,
        description="Pairs the speculate task keeps in total (after the per-user cap); "
        "bounds the inference and cache cost of one interval.",
    )
    speculate_max_per_user: int | None = Field(
        default=None, ge=1,
        description="With a global budget: most pairs one user keeps, so the total goes to "
        "the best pairs across users (active users get more); default the budget per user, "
        "which also sizes the candidate pools.",
    )
    speculate_faiss_k: int | None = Field(
        default=None, ge=1,
        description="Nearest live items per user from each FAISS source (the candidate pool's "
        "depth); default the budget per user. Deeper pools (2-3x) find more of the next "
        "interval's pairs for the scorer to rank, at more speculate time.",
    )
    speculate_live_window: str | None = Field(
        default=None, pattern=r"^\d+[smhdw]$",
        description="Items seen within this window before the interval's end are candidates "
        "(live); default 2d. The window widens by itself on logs whose items come back after "
        "weeks (see SOLARIS_SPECULATE_LIVE_TAIL_SHARE).",
    )
    speculate_live_gaps: float | None = Field(
        default=None, ge=0,
        description="An item also stays live for this many of its own mean gaps between rows "
        "after it was last seen (sporadic items, e.g. films in a ratings log); default 3, 0: the "
        "live window alone.",
    )
    speculate_live_tail_share: float | None = Field(
        default=None, ge=0, lt=1,
        description="With a labelled previous interval, the live window widens to the silence "
        "beyond which items carried at most this share of that interval's rows; default 0.02, "
        "0: the live window as given.",
    )

    fallback_clusters: int = Field(
        default=32, ge=0,
        description="Item clusters of the hierarchical fallback: the infer task also embeds "
        "every speculated user with each cluster's representative item, served by the client "
        "at level CLUSTER where the exact pair is missing (0 turns the level off).",
    )

    spark_py_files: str | None = Field(
        default=None,
        description="Comma-separated --py-files for spark-submit on a cluster whose executors do "
        "not have SOLARIS installed (e.g. dist/solaris_lib.zip from `make dist`).",
    )

    @field_validator("data_root", "model_dir")
    @classmethod
    def _absolute_local_paths(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "://" in value:
            scheme = value.split("://", 1)[0].lower()
            if scheme in OBJECT_STORES:
                raise ValueError(
                    f"{value!r} is on an object store, which SOLARIS does not support yet: "
                    "every stage publishes a partition by renaming its staging directory "
                    "(atomic on HDFS and on a local or NFS folder; an object store copies "
                    "object by object, so readers could see half a partition). Use an hdfs:// "
                    "root or a folder every node mounts.")
            return value
        return str(Path(value).expanduser().resolve())

    @field_validator("model_factories")
    @classmethod
    def _factory_names(cls, value: str) -> str:
        parse_factories(value)
        return value

    @property
    def allowed_model_factories(self) -> tuple[str, ...]:
        """``model_factories`` as a tuple of ``module:callable`` names."""
        return parse_factories(self.model_factories)

    @property
    def models_root(self) -> str:
        """Folder holding model artefacts (``<data_root>/models`` unless set)."""
        return self.model_dir or f"{self.data_root.rstrip('/')}/models"


def load_settings(**overrides: object) -> SolarisSettings:
    """Read the settings from the environment, with explicit overrides (e.g. from the CLI) on top.

    Raises :class:`ConfigError` naming the offending variable on unknown keys or bad values.
    """
    unknown = unknown_solaris_variables()
    if unknown:
        raise ConfigError(
            f"unknown SOLARIS_* environment variables: {', '.join(unknown)}; "
            f"known: {', '.join(_known_variables())}"
        )
    try:
        clean = {k: v for k, v in overrides.items() if v is not None}
        return SolarisSettings(**clean)
    except ValidationError as exc:
        raise ConfigError(f"invalid SOLARIS settings ({validation_problems(exc)})") from exc


def settings_env(settings: SolarisSettings) -> dict[str, str]:
    """The ``SOLARIS_*`` environment that reproduces ``settings`` in a child process."""
    env = {}
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"SOLARIS_{name.upper()}"] = str(value)
    return env


def _known_variables() -> list[str]:
    return [f"SOLARIS_{name.upper()}" for name in SolarisSettings.model_fields]


def unknown_solaris_variables(environ: dict[str, str] | None = None) -> list[str]:
    """``SOLARIS_*`` variables in the environment that no setting reads."""
    known = set(_known_variables())
    env = os.environ if environ is None else environ
    return sorted(k for k in env if k.startswith("SOLARIS_") and k not in known)
