"""The precompute DAG end to end with ``dag.test()``: sensor, mine, speculate, infer, evaluate
and publish as real spark-submit jobs on tiny simulated logs, then lookups through the client."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import redis

from solaris_lib.client import Level, SolarisClient
from solaris_lib.config import SolarisSettings
from solaris_lib.evaluation.serving import read_evaluation
from solaris_lib.layout import EMBEDDINGS, SPECULATED, DataLayout
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.orchestration.conftest import FIRST, run_dag

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def published_content(url: str, prefix: str, version: str) -> dict[bytes, dict]:
    """Every key of one cache version under ``prefix`` with its hash or string value (other
    sessions on the same Redis may publish the same version id under their own prefix)."""
    client = redis.Redis.from_url(url)
    content = {}
    for key in client.scan_iter(match=f"{prefix}:*{version}*", count=1000):
        kind = client.type(key)
        content[key] = client.hgetall(key) if kind == b"hash" else client.get(key)
    client.close()
    return content


def test_precompute_dag_publishes_what_the_client_then_finds(pipeline):
    settings = SolarisSettings(data_root=str(pipeline.data_root), redis_url=pipeline.redis_url,
                               redis_key_prefix=pipeline.key_prefix)
    layout = DataLayout.from_settings(settings)
    assert run_dag("solaris_precompute", FIRST.end).state == "success"

    speculated = pq.read_table(layout.output(SPECULATED, FIRST)).to_pandas()
    embeddings = pq.read_table(layout.output(EMBEDDINGS, FIRST)).to_pandas()
    assert len(speculated) > 0 and len(embeddings) == len(speculated)
    evaluation = read_evaluation(layout, FIRST)
    assert evaluation is not None and evaluation["published"] is False  # nothing before FIRST

    user = int(speculated["user_id"].iloc[0])
    items = speculated.loc[speculated["user_id"] == user, "item_id"].astype(int).tolist()
    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        found = client.lookup(user, items + [987_654_321])
        version = client.version
    assert version is not None and version.startswith(FIRST.key)
    assert found.hit[:-1].all() and not found.hit[-1]
    dim = len(embeddings["embedding"].iloc[0]) // 2  # fp16 bytes, the model's dimension
    assert found.embeddings.shape == (len(items) + 1, dim)
    assert (found.level[:-1] == Level.EXACT).all() and found.level[-1] == Level.MISS

    # the hierarchical fallback: items this user was not speculated on answer at cluster level
    clustered = pq.read_table(layout.output(EMBEDDINGS, FIRST, "item_clusters")).to_pandas()
    others = sorted(set(clustered["item_id"].astype(int)) - set(items))[:20]
    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        coarse = client.lookup(user, others)
        stranger = int(speculated["user_id"].max()) + 1  # a user no run speculated
        prior = client.lookup(stranger, others)
    assert others and (coarse.level == Level.CLUSTER).all() and not coarse.hit.any()
    # the ITEM level: an unspeculated user gets each live item's prior (empty-history FM)
    priors = pq.read_table(layout.output(EMBEDDINGS, FIRST, "item_prior")).to_pandas()
    by_item = dict(zip(priors["item_id"].astype(int), priors["embedding"], strict=True))
    assert (prior.level == Level.ITEM).all() and not prior.hit.any()
    for row, item in enumerate(others):
        assert prior.embeddings[row].tolist() == np.frombuffer(by_item[item], "<f2").tolist()
    before = published_content(pipeline.redis_url, pipeline.key_prefix, version)
    assert before

    # a rerun of the same interval (a retry, a backfill) publishes the same content
    assert run_dag("solaris_precompute", FIRST.end).state == "success"
    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.version == version
    assert published_content(pipeline.redis_url, pipeline.key_prefix, version) == before
