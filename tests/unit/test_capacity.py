"""The capacity plan's arithmetic on round numbers, computed here by hand."""

import pytest

from solaris_lib.capacity import (
    Assumptions,
    Scale,
    UnitCosts,
    crossover_budget,
    per_budget_pair,
    plan,
)

COSTS = UnitCosts(speculation_core_us_per_row=10.0, inference_pairs_per_s_cpu_core=1000.0,
                  inference_pairs_per_s_gpu=100_000.0, publish_pairs_per_s_core=50_000.0,
                  redis_bytes_per_pair=150.0, redis_write_pairs_per_s=200_000.0,
                  lookup_server_us=20.0, wire_bytes_per_pair=150.0)
SCALE = Scale(daily_users=1e6, requests_per_user_day=10, candidates_per_request=100,
              budget_per_user=200, interval_h=1.0)


def test_a_plan_by_hand():
    got = plan(SCALE, COSTS, Assumptions())
    # 1e6 users x 10 requests x 100 candidates = 1e9 rows a day, 28 days of lookback
    assert got.log_rows_per_day == 1e9 and got.lookback_rows == 28e9
    # 28e9 rows x 10 us = 280,000 core-s within 0.4 of 3,600 s: 194.4 cores, 6.08 nodes of 32
    assert got.spark_cores == pytest.approx(280_000 / 1440)
    assert got.spark_nodes == pytest.approx(280_000 / 1440 / 32)
    assert got.pairs_per_interval == 2e8
    assert got.inference_gpu_hours == pytest.approx(2e8 / 1e5 / 3600)  # 0.56 GPU-hours
    assert got.inference_gpus == pytest.approx(2000 / 1440)  # 1.39 GPUs at once
    assert got.inference_gpu_nodes == pytest.approx(2000 / 1440 / 8)
    assert got.inference_cpu_core_hours == pytest.approx(2e8 / 1000 / 3600)  # 55.6
    assert got.publish_cores == pytest.approx(2e8 / 50_000 / 720)  # 5.6 cores for 720 s
    assert got.write_mb_per_s == pytest.approx(2e8 * 150 / 720 / 1e6)  # 41.7 MB/s
    assert got.redis_gb == pytest.approx(90.0)  # 3 versions x 2e8 x 150 B: 4 shards of 25 GB
    assert got.lookups_per_s_peak == pytest.approx(1e7 / 86400 * 3)  # 347/s: 0.007 s/s of CPU
    assert got.redis_shards_write == 2  # 2e8 pairs / 720 s = 277,778/s over 200,000/s a shard
    assert (got.redis_shards_memory, got.redis_shards_cpu, got.redis_shards) == (4, 1, 4)
    assert got.redis_nodes == 8  # with one replica each
    assert got.binding == "redis"  # 8 Redis nodes > 6.1 Spark nodes > 0.17 GPU nodes


def test_lookups_and_writes_can_size_redis_too():
    busy = plan(Scale(1e6, 1000, 1, 200), COSTS)  # 1e9 lookups a day: 34,722/s at peak
    assert busy.redis_shards_cpu == 2  # 34,722 x 20 us = 0.69 s/s over 0.5 of a core
    slow_writes = plan(SCALE, UnitCosts(**{**COSTS.__dict__, "redis_write_pairs_per_s": 10_000}))
    assert slow_writes.redis_shards == slow_writes.redis_shards_write == 28  # 277,778 / 10,000


def test_the_budget_moves_inference_and_redis_not_spark():
    half = plan(Scale(1e6, 10, 100, 100), COSTS)
    full = plan(SCALE, COSTS)
    assert full.spark_cores == half.spark_cores
    assert full.inference_gpu_hours == pytest.approx(2 * half.inference_gpu_hours)
    assert full.redis_gb == pytest.approx(2 * half.redis_gb)
    price = per_budget_pair(SCALE, COSTS)
    assert price["redis_gb"] == pytest.approx(3 * 1e6 * 150 / 1e9)
    assert price["inference_gpu_hours"] == pytest.approx(1e6 / 1e5 / 3600)
    assert price["write_mb_per_s"] == pytest.approx(1e6 * 150 / 720 / 1e6)
    assert price["spark_cores"] == 0.0
    assert full.inference_gpu_hours - half.inference_gpu_hours == pytest.approx(
        100 * price["inference_gpu_hours"])


def test_below_the_crossover_budget_spark_binds_before_the_gpus():
    budget = crossover_budget(SCALE, COSTS)
    # Spark nodes 280,000 / 1440 / 32 = 6.08; GPU nodes per unit of budget 1e6 / 1e5 / 1440 / 8
    assert budget == pytest.approx((280_000 / 1440 / 32) / (1e6 / 1e5 / 1440 / 8))  # 4,861
    no_redis = Assumptions(replicas_per_shard=0, redis_shard_gb=1e9)
    fast_redis = UnitCosts(**{**COSTS.__dict__, "redis_write_pairs_per_s": 1e12})
    assert plan(Scale(1e6, 10, 100, int(budget) - 1), fast_redis, no_redis).binding == "spark"
    assert plan(Scale(1e6, 10, 100, int(budget) + 1), fast_redis, no_redis).binding == "inference"
