"""The precompute DAG end to end with ``dag.test()``: sensor, mine, speculate, infer, evaluate
and publish as real spark-submit jobs on tiny simulated logs (the session's ``precompute_first``
run), then lookups through the client. The next interval runs through the scheduler and the
REST API on Spark and Redis clusters (test_multinode.py); a rerun after a killed job publishes
the same content (test_pipeline_faults.py)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from solaris_lib.client import Level, SolarisClient
from solaris_lib.config import SolarisSettings
from solaris_lib.evaluation.serving import read_evaluation
from solaris_lib.layout import EMBEDDINGS, SPECULATED, DataLayout
from solaris_lib.orchestration.reporting import metrics_of
from solaris_lib.runs import read_report
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.orchestration.conftest import FIRST

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_precompute_dag_publishes_what_the_client_then_finds(pipeline, precompute_first):
    settings = SolarisSettings(data_root=str(pipeline.data_root), redis_url=pipeline.redis_url,
                               redis_key_prefix=pipeline.key_prefix)
    layout = DataLayout.from_settings(settings)

    speculated = pq.read_table(layout.output(SPECULATED, FIRST)).to_pandas()
    embeddings = pq.read_table(layout.output(EMBEDDINGS, FIRST)).to_pandas()
    assert len(speculated) > 0 and len(embeddings) == len(speculated)
    evaluation = read_evaluation(layout, FIRST)
    assert evaluation is not None and evaluation["published"] is False  # nothing before FIRST
    # the fallback level's report against its table: every speculated user with every cluster
    assert read_report(settings, "mine", FIRST)["quarantined_rows"] == 0  # simulated: clean
    infer = read_report(settings, "infer-embeddings", FIRST)
    level = infer["fallback"]
    cluster = pq.read_table(layout.output(EMBEDDINGS, FIRST, "cluster")).to_pandas()
    pairs = speculated["user_id"].nunique() * cluster["cluster_id"].nunique()
    assert level["rows_written"] == len(cluster) == pairs > 0
    assert (level["non_finite"], level["prior_non_finite"]) == (0, 0)
    gauges = metrics_of("infer-embeddings", infer)
    assert (gauges["fallback_skipped"], gauges["fallback.rows_written"]) == (0.0, len(cluster))

    user = int(speculated["user_id"].iloc[0])
    items = speculated.loc[speculated["user_id"] == user, "item_id"].astype(int).tolist()
    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        found = client.lookup(user, items + [987_654_321])
        version = client.version
    assert version == precompute_first.version
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
