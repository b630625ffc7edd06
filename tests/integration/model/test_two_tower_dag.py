"""The two-tower model through the real DAGs end to end: the training DAG trains and promotes
it (``SOLARIS_FOUNDATION_MODEL=two_tower``; nothing in ``dags/`` names a model), the precompute
DAG infers and publishes with it, and the client looks the pairs up with hits."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow.parquet as pq
import pytest

from solaris_lib.client import Level, SolarisClient
from solaris_lib.config import SolarisSettings
from solaris_lib.layout import EMBEDDINGS, MINED, SPECULATED, DataLayout
from solaris_lib.model import artefact
from solaris_lib.model.contract import TWO_TOWER_FACTORY
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.conftest import FIRST, run_dag, trained_world

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_tower_pipeline(pipeline, precompute_first, tmp_path_factory):
    """A copy of the shared pipeline's logs, retrieval factors and mined and speculated
    partitions (its run of FIRST), a two-tower model trained and promoted there by the
    foundation training DAG, then the precompute DAG rerun for FIRST: the sensor, ``infer`` and
    ``publish`` for real, ``mine``, ``speculate`` and ``evaluate`` marked success (their
    partitions are the copied ones and do not depend on the model). SOLARIS_* variables point
    every job at the copy."""
    data_root = tmp_path_factory.mktemp("two-tower-pipeline") / "data"
    with trained_world(data_root, pipeline.redis_url, f"solaris-test-tt-{uuid.uuid4().hex[:10]}",
                       FIRST.start, copy_of=pipeline.data_root, copied=(MINED, SPECULATED),
                       SOLARIS_FOUNDATION_MODEL="two_tower") as world:
        run = run_dag("solaris_precompute", FIRST.end,
                      mark_success_pattern="mine|speculate|evaluate")
        assert run.state == "success"
        yield world


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

    speculated = pq.read_table(layout.output(SPECULATED, FIRST)).to_pandas()
    embeddings = pq.read_table(layout.output(EMBEDDINGS, FIRST)).to_pandas()
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
