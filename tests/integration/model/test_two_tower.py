"""The two-tower model through training and Spark batch inference: trained by the training job
(``--model two_tower``), promoted over an FM, its versions named by their manifests, inferred
with the same contract columns and the model's own per-pair numbers."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from solaris_lib import cli  # noqa: E402
from solaris_lib.cache.format import Codec  # noqa: E402
from solaris_lib.config import load_settings  # noqa: E402
from solaris_lib.errors import ConfigError  # noqa: E402
from solaris_lib.layout import EMBEDDINGS, DataLayout  # noqa: E402
from solaris_lib.model import artefact  # noqa: E402
from solaris_lib.model.contract import FOUNDATION_FACTORY, TWO_TOWER_FACTORY  # noqa: E402
from solaris_lib.model.examples import EventLists  # noqa: E402
from solaris_lib.model.inference import InferRequest, run_inference  # noqa: E402
from solaris_lib.model.online import FoundationEmbedder  # noqa: E402
from solaris_lib.model.train import TrainRequest, run_training  # noqa: E402
from solaris_lib.model.two_tower import TwoTowerNet  # noqa: E402
from solaris_lib.storage import list_files  # noqa: E402
from tests.integration.model.conftest import INFER, WINDOW  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained(inference_inputs, tmp_path_factory):
    """An FM serving first, then a two-tower model trained by the CLI (it may or may not beat
    the FM: the gate decides); the two-tower version is then served explicitly."""
    base, pairs, history = inference_inputs
    settings = load_settings(data_root=base.data_root,
                             model_dir=str(tmp_path_factory.mktemp("two-tower-models")))
    fm = run_training(settings, TrainRequest(WINDOW, preset="test", epochs=1))
    tt = run_training(settings, TrainRequest(WINDOW, preset="test", epochs=2, model="two_tower"))
    return settings, pairs, history, fm, tt


def test_training_writes_a_two_tower_version_named_by_its_manifest(trained):
    settings, _, _, fm, tt = trained
    root = f"{settings.models_root}/foundation"
    assert artefact.manifest(fm.folder) == {"factory": FOUNDATION_FACTORY}
    assert artefact.manifest(tt.folder) == {"factory": TWO_TOWER_FACTORY}
    assert tt.metrics["model"] == "two_tower" and tt.version != fm.version
    assert 0 < tt.metrics["foundation"]["log_loss"] < 1  # the trained model's held-out metrics
    # the promotion gate compared it with the FM serving before it, loaded through its factory
    assert tt.metrics["serving_at_training"]["version"] == fm.version
    assert "log_loss" in tt.metrics["serving_at_training"]
    assert tt.promoted == (artefact.serving_version(root) == tt.version)
    assert isinstance(artefact.load_model(tt.folder), TwoTowerNet)


def test_a_two_tower_version_serves_batch_inference(spark, trained):
    settings, pairs, history, _, tt = trained
    root = f"{settings.models_root}/foundation"
    artefact.set_serving(root, tt.version)
    report = run_inference(spark, settings, InferRequest(INFER, batch_users=5))
    assert report.model_version == tt.version and report.non_finite == 0
    path = DataLayout.from_settings(settings).output(EMBEDDINGS, INFER)
    table = pa.concat_tables([pq.read_table(f) for f in list_files(path)]).sort_by(
        [("user_id", "ascending"), ("item_id", "ascending")])
    want = sorted(set(zip(pairs["user_id"].to_pylist(), pairs["item_id"].to_pylist(),
                          strict=True)))
    assert list(zip(table["user_id"].to_pylist(), table["item_id"].to_pylist(),
                    strict=True)) == want
    assert set(table["model_version"].to_pylist()) == {tt.version}
    embedder = FoundationEmbedder.load(root, "cpu")
    assert isinstance(embedder.net, TwoTowerNet) and embedder.dim == 64
    decoded, hit, _ = Codec("fp16", 64).decode(table["embedding"].to_pylist())
    users = np.array(table["user_id"].to_pylist())
    uniq, counts = np.unique(users, return_counts=True)
    ref, _ = embedder.score_users(EventLists.from_user_history(history), uniq, counts,
                                  np.array(table["item_id"].to_pylist()), INFER.end, naive=True)
    assert hit.all() and np.abs(decoded - ref).max() <= 2e-3 * max(1.0, np.abs(ref).max())
    # an operator who allows only the FM refuses to serve it, before Spark does any work
    fm_only = settings.model_copy(update={"model_factories": FOUNDATION_FACTORY})
    with pytest.raises(ConfigError, match="not allowed"):
        run_inference(spark, fm_only, InferRequest(INFER))


def test_the_cli_trains_the_model_the_setting_names(trained, monkeypatch, capsys):
    settings, *_ = trained
    monkeypatch.setenv("SOLARIS_DATA_ROOT", settings.data_root)
    monkeypatch.setenv("SOLARIS_MODEL_DIR", settings.models_root)
    monkeypatch.setenv("SOLARIS_FOUNDATION_MODEL", "two_tower")
    code = cli.main(["train-foundation", "--start", WINDOW.start.isoformat(), "--end",
                     WINDOW.end.isoformat(), "--preset", "test", "--epochs", "1", "--seed", "3"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["metrics"]["model"] == "two_tower"
    assert artefact.manifest(report["folder"]) == {"factory": TWO_TOWER_FACTORY}
