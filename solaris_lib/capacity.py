"""Capacity planning on paper: the cluster a deployment needs, from measured per-unit figures.

:class:`UnitCosts` holds what the benchmarks measure (speculation core-us per log row,
inference pairs/s per CPU core and per GPU, publish pairs/s per core, Redis bytes per pair,
Redis writes/s per server, server us per lookup); :class:`Scale` describes a deployment
(daily users, requests per user per day, candidates per request, the budget, the interval);
:func:`plan` turns both into Spark cores, GPU hours per interval, Redis memory and shards and
write bandwidth, under the :class:`Assumptions` stated beside them (docs/capacity.md).
Pure arithmetic: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class UnitCosts:
    """Per-unit figures (benchmarks/capacity.py gathers them and says where each came from)."""

    speculation_core_us_per_row: float  # mine + retrieval + speculate, core-us per lookback row
    inference_pairs_per_s_cpu_core: float  # FM shared-history path, fp32, one CPU core
    inference_pairs_per_s_gpu: float  # the same path on one GPU (bf16): measured or assumed
    publish_pairs_per_s_core: float  # whole publish (survey, write, check, switch) per core
    redis_bytes_per_pair: float  # used_memory growth per cached pair (fp16 dim D, keys, hashes)
    redis_write_pairs_per_s: float  # pairs/s one Redis server absorbed (pipelined HSETs)
    lookup_server_us: float  # Redis CPU per lookup (the HMGETs of one user, N items), us
    wire_bytes_per_pair: float  # bytes sent to Redis per pair written (value, field, framing)


@dataclass(frozen=True)
class Scale:
    """One deployment's size and knobs."""

    daily_users: float
    requests_per_user_day: float
    candidates_per_request: float  # log rows per request: every candidate the ranker scored
    budget_per_user: int  # pairs precomputed per speculated user and interval
    interval_h: float = 1.0


@dataclass(frozen=True)
class Assumptions:
    """What the plan assumes beyond the measurements; every one is a stated choice."""

    lookback_days: float = 28.0  # mine reads the whole lookback every interval (as built)
    speculated_share_of_daily_users: float = 1.0  # users speculated per interval / daily users
    speculate_share: float = 0.4  # of the interval, for mine + speculate
    infer_share: float = 0.4  # of the interval, for inference
    publish_share: float = 0.2  # of the interval, for the publish
    resident_versions: int = 3  # served + failover + the one being written
    redis_shard_gb: float = 25.0  # usable memory per shard (maxmemory with headroom)
    redis_shard_cpu_share: float = 0.5  # of one core a shard's lookups may use at peak
    lookup_peak_factor: float = 3.0  # peak lookups/s over the daily mean
    cores_per_spark_node: int = 32
    gpus_per_node: int = 8
    replicas_per_shard: int = 1


@dataclass
class Plan:
    """Requirements of one scale, per interval unless named otherwise."""

    log_rows_per_day: float
    lookback_rows: float
    pairs_per_interval: float
    spark_cores: float  # busy for speculate_share of every interval
    spark_nodes: float
    inference_gpu_hours: float  # per interval
    inference_gpus: float  # at once, to finish within infer_share of the interval
    inference_gpu_nodes: float
    inference_cpu_core_hours: float  # the same work on CPU cores, for comparison
    publish_cores: float  # Spark cores writing during publish_share of the interval
    write_mb_per_s: float  # into Redis during the publish
    redis_gb: float  # resident_versions versions, without replicas
    lookups_per_s_peak: float
    redis_shards_memory: int
    redis_shards_cpu: int
    redis_shards_write: int
    redis_shards: int
    redis_nodes: int  # shards with their replicas
    binding: str  # the resource needing the most machines: spark, inference or redis

    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def plan(scale: Scale, costs: UnitCosts, assume: Assumptions | None = None) -> Plan:
    """The cluster ``scale`` needs with ``costs`` under ``assume`` (defaults: Assumptions())."""
    a = assume or Assumptions()
    interval_s = scale.interval_h * 3600
    rows_day = scale.daily_users * scale.requests_per_user_day * scale.candidates_per_request
    lookback_rows = rows_day * a.lookback_days
    pairs = scale.daily_users * a.speculated_share_of_daily_users * scale.budget_per_user
    spark_cores = lookback_rows * costs.speculation_core_us_per_row / 1e6 / (
        interval_s * a.speculate_share)
    gpu_s = pairs / costs.inference_pairs_per_s_gpu
    gpus = gpu_s / (interval_s * a.infer_share)
    publish_s = interval_s * a.publish_share
    redis_gb = a.resident_versions * pairs * costs.redis_bytes_per_pair / 1e9
    lookups = scale.daily_users * scale.requests_per_user_day / 86400 * a.lookup_peak_factor
    by_memory = math.ceil(redis_gb / a.redis_shard_gb)
    by_cpu = math.ceil(lookups * costs.lookup_server_us / 1e6 / a.redis_shard_cpu_share)
    by_write = math.ceil(pairs / publish_s / costs.redis_write_pairs_per_s)
    shards = max(1, by_memory, by_cpu, by_write)
    machines = {"spark": spark_cores / a.cores_per_spark_node,
                "inference": gpus / a.gpus_per_node,
                "redis": float(shards * (1 + a.replicas_per_shard))}
    return Plan(
        log_rows_per_day=rows_day, lookback_rows=lookback_rows, pairs_per_interval=pairs,
        spark_cores=spark_cores, spark_nodes=machines["spark"],
        inference_gpu_hours=gpu_s / 3600, inference_gpus=gpus,
        inference_gpu_nodes=machines["inference"],
        inference_cpu_core_hours=pairs / costs.inference_pairs_per_s_cpu_core / 3600,
        publish_cores=pairs / costs.publish_pairs_per_s_core / publish_s,
        write_mb_per_s=pairs * costs.wire_bytes_per_pair / publish_s / 1e6,
        redis_gb=redis_gb, lookups_per_s_peak=lookups, redis_shards_memory=by_memory,
        redis_shards_cpu=by_cpu, redis_shards_write=by_write, redis_shards=shards,
        redis_nodes=shards * (1 + a.replicas_per_shard),
        binding=max(machines, key=machines.get))


def per_budget_pair(scale: Scale, costs: UnitCosts, assume: Assumptions | None = None) -> dict:
    """What one more pair per speculated user and interval costs: the budget knob's price.
    Speculation's Spark cost follows the log rows, not the budget (0 here)."""
    a = assume or Assumptions()
    users = scale.daily_users * a.speculated_share_of_daily_users
    publish_s = scale.interval_h * 3600 * a.publish_share
    return {"inference_gpu_hours": users / costs.inference_pairs_per_s_gpu / 3600,
            "redis_gb": a.resident_versions * users * costs.redis_bytes_per_pair / 1e9,
            "write_mb_per_s": users * costs.wire_bytes_per_pair / publish_s / 1e6,
            "spark_cores": 0.0}


def crossover_budget(scale: Scale, costs: UnitCosts, assume: Assumptions | None = None) -> float:
    """The budget per user at which inference needs as many GPU nodes as speculation needs
    Spark nodes: below it Spark binds before the GPUs, above it the GPUs bind first."""
    a = assume or Assumptions()
    gpu_nodes_per_pair = (scale.daily_users * a.speculated_share_of_daily_users
                          / costs.inference_pairs_per_s_gpu
                          / (scale.interval_h * 3600 * a.infer_share) / a.gpus_per_node)
    return plan(scale, costs, a).spark_nodes / gpu_nodes_per_pair
