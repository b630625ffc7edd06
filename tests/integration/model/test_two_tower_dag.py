"""The two-tower model through the real DAGs end to end: the training DAG trains and promotes
it (``SOLARIS_FOUNDATION_MODEL=two_tower``; nothing in ``dags/`` names a model), the precompute
DAG infers, evaluates and publishes with it, and the client looks the pairs up with hits."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

import numpy as np
import pyarrow.parquet as pq
import pytest

from solaris_lib.client import Level, SolarisClient
from solaris_lib.config import SolarisSettings
from solaris_lib.layout import EMBEDDINGS, SPECULATED, DataLayout
from solaris_lib.model import artefact
from solaris_lib.model.contract import TWO_TOWER_FACTORY
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.conftest import FIRST, WORLD, Pipeline, run_dag

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# Its own logical dates: dag.test of a (DAG, logical date) replaces that DAG run in the shared
# Airflow DB, so the shared pipeline's runs of FIRST on the other xdist worker must not be hit.
EARLY = FIRST.shift(-timedelta(hours=2))


@pytest.fixture(scope="module")
def two_tower_pipeline(tmp_path_factory, redis_url, airflow_db):
    """The tiny world, retrieval factors and a two-tower model trained by the training DAGs,
    then one precompute run of EARLY; SOLARIS_* variables point every job at it."""
    import redis

    from solaris_lib.simulate.world import Simulator

    data_root = tmp_path_factory.mktemp("two-tower-pipeline") / "data"
    prefix = f"solaris-test-tt-{uuid.uuid4().hex[:10]}"
    env = {"SOLARIS_DATA_ROOT": str(data_root), "SOLARIS_REDIS_URL": redis_url,
           "SOLARIS_REDIS_KEY_PREFIX": prefix, "SOLARIS_FOUNDATION_PRESET": "test",
           "SOLARIS_FOUNDATION_MODEL": "two_tower",
           "SOLARIS_SPECULATE_BUDGET_PER_USER": "20", "SOLARIS_FALLBACK_CLUSTERS": "8"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        Simulator(WORLD).run(str(data_root / "logs"))
        for dag_id in ("solaris_train_retrieval", "solaris_train_foundation"):
            assert run_dag(dag_id, EARLY.start).state == "success", dag_id
        assert run_dag("solaris_precompute", EARLY.end).state == "success"
        yield Pipeline(data_root, redis_url, prefix)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start:start + 500])


def test_the_two_tower_model_is_trained_promoted_inferred_published_and_found(
        two_tower_pipeline):
    p = two_tower_pipeline
    settings = SolarisSettings(data_root=str(p.data_root), redis_url=p.redis_url,
                               redis_key_prefix=p.key_prefix)
    layout = DataLayout.from_settings(settings)
    root = layout.model("foundation")
    serving = artefact.serving_version(root)
    assert serving is not None  # trained and promoted by the training DAG
    assert artefact.manifest(artefact.version_dir(root, serving)) == {
        "factory": TWO_TOWER_FACTORY}

    speculated = pq.read_table(layout.output(SPECULATED, EARLY)).to_pandas()
    embeddings = pq.read_table(layout.output(EMBEDDINGS, EARLY)).to_pandas()
    assert len(speculated) > 0 and len(embeddings) == len(speculated)
    assert set(embeddings["model_version"]) == {serving}
    assert {len(e) for e in embeddings["embedding"]} == {2 * 64}  # D = 64 fp16

    user = int(speculated["user_id"].iloc[0])
    items = speculated.loc[speculated["user_id"] == user, "item_id"].astype(int).tolist()
    with SolarisClient.from_url(p.redis_url, key_prefix=p.key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        found = client.lookup(user, items + [987_654_321])
    assert found.hit[:-1].all() and not found.hit[-1]
    assert (found.level[:-1] == Level.EXACT).all()
    rows = embeddings[embeddings["user_id"] == user].set_index("item_id")["embedding"]
    for row, item in enumerate(items):
        assert found.embeddings[row].tolist() == np.frombuffer(rows[item], "<f2").tolist()
