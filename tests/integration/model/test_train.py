"""The training job on a tiny simulated world: artefact, metrics, determinism, promotion."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

pytest.importorskip("torch")

from solaris_lib import cli  # noqa: E402
from solaris_lib.config import load_settings  # noqa: E402
from solaris_lib.errors import ConfigError, EmptyInputError  # noqa: E402
from solaris_lib.model import artefact  # noqa: E402
from solaris_lib.model.train import TrainRequest, run_training  # noqa: E402
from solaris_lib.storage import is_complete  # noqa: E402
from tests.integration.model.conftest import WINDOW  # noqa: E402


@pytest.fixture
def settings(model_data_root, tmp_path):
    return load_settings(data_root=str(model_data_root), model_dir=str(tmp_path / "models"))


def test_train_writes_a_versioned_artefact_and_promotes_it(settings):
    report = run_training(settings, TrainRequest(WINDOW, preset="small"))
    root = f"{settings.models_root}/foundation"
    assert report.promoted and artefact.serving_version(root) == report.version
    assert report.version.startswith(f"{WINDOW.key}-") and len(report.version) == 16 + 1 + 8
    assert is_complete(report.folder)
    saved = artefact.read_json(f"{report.folder}/metrics.json")
    for model in ("foundation", "id_only"):
        assert 0 < saved[model]["log_loss"] < 1 and 0 <= saved[model]["roc_auc"] <= 1
        assert saved[model]["pairs"] == saved["foundation"]["pairs"] > 0
    window = artefact.read_json(f"{report.folder}/window.json")
    assert window["holdout_start"] == "2026-01-07T00:00:00+00:00"
    rerun = run_training(settings, TrainRequest(WINDOW, preset="small"))
    assert rerun.version == report.version and rerun.metrics["foundation"] == saved["foundation"]
    assert [v.version for v in artefact.list_versions(root)] == [report.version]


def test_promotion_refuses_a_worse_model(settings):
    good = run_training(settings, TrainRequest(WINDOW, preset="small"))
    worse = run_training(settings, TrainRequest(WINDOW, preset="test", epochs=1, seed=1))
    root = f"{settings.models_root}/foundation"
    new_loss = worse.metrics["foundation"]["log_loss"]
    old_loss = worse.metrics["serving_at_training"]["log_loss"]
    assert old_loss == pytest.approx(good.metrics["foundation"]["log_loss"], rel=1e-9)
    assert new_loss > old_loss  # the tiny one-epoch model really is worse on this holdout
    assert not worse.promoted and "kept serving" in worse.decision
    assert artefact.serving_version(root) == good.version
    assert {v.version for v in artefact.list_versions(root)} == {good.version, worse.version}


def test_cli_train_and_list(settings, monkeypatch, capsys):
    monkeypatch.setenv("SOLARIS_DATA_ROOT", settings.data_root)
    monkeypatch.setenv("SOLARIS_MODEL_DIR", settings.models_root)
    code = cli.main(["train-foundation", "--start", "2026-01-05", "--end", "2026-01-08",
                     "--preset", "test", "--epochs", "1"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli.main(["model-versions", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["serving"] == report["version"]
    assert [v["version"] for v in listed["versions"]] == [report["version"]]


def test_bad_windows_are_clear_errors(settings):
    with pytest.raises(ConfigError):
        TrainRequest(WINDOW, holdout=timedelta(days=3))
    with pytest.raises(EmptyInputError):
        run_training(settings, TrainRequest(WINDOW.shift(timedelta(days=30)), preset="test"))


@pytest.mark.slow
@pytest.mark.integration
def test_distributed_training_with_torch_distributor(spark, settings):
    """--processes 2: two DDP (gloo) workers started by Spark's TorchDistributor."""
    report = run_training(settings, TrainRequest(WINDOW, preset="test", processes=2))
    assert report.promoted and report.metrics["processes"] == 2
    assert 0 < report.metrics["foundation"]["log_loss"] < 1
    cfg, state = artefact.load_state(report.folder)
    assert all(bool(v.isfinite().all()) for v in state.values() if v.is_floating_point())
