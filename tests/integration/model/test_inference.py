"""Batch inference in Spark local mode: contract columns, decoded values, reruns, NaN models."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from solaris_lib.cache.format import Codec  # noqa: E402
from solaris_lib.config import load_settings  # noqa: E402
from solaris_lib.layout import EMBEDDINGS, MINED, DataLayout  # noqa: E402
from solaris_lib.model import artefact  # noqa: E402
from solaris_lib.model.examples import EventLists  # noqa: E402
from solaris_lib.model.inference import (  # noqa: E402
    InferRequest,
    MissingPartitionError,
    NonFiniteOutputError,
    run_inference,
)
from solaris_lib.model.online import FoundationEmbedder  # noqa: E402
from solaris_lib.model.train import TrainRequest, run_training  # noqa: E402
from solaris_lib.storage import is_complete, list_files  # noqa: E402
from tests.integration.model.conftest import (  # noqa: E402
    INFER,
    UNKNOWN_USER,
    WINDOW,
    write_partition,
)
from tests.nan_model import write_nan_copy  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(inference_inputs, tmp_path_factory):
    """Inputs plus a trained, serving 'test' model in a model root of this module's own."""
    base, pairs, history = inference_inputs
    settings = load_settings(data_root=base.data_root,
                             model_dir=str(tmp_path_factory.mktemp("infer-models")))
    report = run_training(settings, TrainRequest(WINDOW, preset="test", epochs=1))
    return settings, pairs, history, report.version


def _read(path: str) -> pa.Table:
    table = pa.concat_tables([pq.read_table(f) for f in list_files(path)])
    return table.sort_by([("user_id", "ascending"), ("item_id", "ascending")])


def test_embeddings_partition(spark, served):
    settings, pairs, history, version = served
    report = run_inference(spark, settings, InferRequest(INFER, batch_users=7))
    out_path = DataLayout.from_settings(settings).output(EMBEDDINGS, INFER)
    assert is_complete(out_path) and report.output == out_path
    table = _read(out_path)
    assert table.schema.names == ["user_id", "item_id", "model_version", "embedding"]
    assert [str(t) for t in table.schema.types] == ["int64", "int64", "string", "binary"]
    want = sorted(set(zip(pairs["user_id"].to_pylist(), pairs["item_id"].to_pylist(),
                          strict=True)))
    got = list(zip(table["user_id"].to_pylist(), table["item_id"].to_pylist(), strict=True))
    assert got == want and report.rows_written == len(want) and report.non_finite == 0
    assert set(table["model_version"].to_pylist()) == {version} == {report.model_version}
    assert report.users_without_history == 2  # the unknown user and the one left out

    embedder = FoundationEmbedder.load(f"{settings.models_root}/foundation", "cpu")
    decoded, hit, corrupt = Codec("fp16", embedder.dim).decode(table["embedding"].to_pylist())
    assert hit.all() and corrupt == 0 and decoded.shape == (len(want), embedder.dim)
    # the per-pair reference path, in this process, from the same inputs
    users = np.array(table["user_id"].to_pylist())
    uniq, counts = np.unique(users, return_counts=True)
    ref, _ = embedder.score_users(EventLists.from_user_history(history), uniq, counts,
                                  np.array(table["item_id"].to_pylist()), INFER.end, naive=True)
    assert np.abs(decoded - ref).max() <= 2e-3 * max(1.0, np.abs(ref).max())
    unknown = users == UNKNOWN_USER
    empty, _ = embedder.score_users(EventLists.empty(), np.array([5]), np.array([unknown.sum()]),
                                    np.array(table["item_id"].to_pylist())[unknown], INFER.end)
    assert np.allclose(decoded[unknown], empty, atol=2e-3)

    rerun = run_inference(spark, settings, InferRequest(INFER, batch_users=100))
    assert rerun.rows_written == report.rows_written
    assert _read(out_path).equals(table)


def test_nan_model_writes_nothing(spark, served):
    settings, *_ = served
    write_nan_copy(f"{settings.models_root}/foundation", "nan-model")
    out_path = DataLayout.from_settings(settings).output(EMBEDDINGS, INFER)
    before = _read(out_path) if is_complete(out_path) else None
    with pytest.raises(NonFiniteOutputError, match="NaN or infinite") as caught:
        run_inference(spark, settings, InferRequest(INFER, model_version="nan-model"))
    assert caught.value.exit_code == 5
    after = _read(out_path) if is_complete(out_path) else None
    assert (before is None and after is None) or before.equals(after)


def _files(folder: str) -> dict[str, bytes]:
    """{name: bytes} of every file of a partition folder (markers included)."""
    return {name: (Path(folder) / name).read_bytes() for name in sorted(os.listdir(folder))}


def test_the_fallback_level_is_replaced_whole_or_not_at_all(spark, served):
    """The level's tables record the clustering the cluster rows were embedded for; a model
    whose embeddings are NaN fails with the exact path's error before any table is replaced."""
    from solaris_lib.cache.fallback import clustering_mismatch, read_item_clusters
    from solaris_lib.fallback.clusters import CLUSTERING_MARKER
    from solaris_lib.model.fallback import embed_fallback_level, infer_cluster_embeddings

    settings, pairs, _, _ = served
    layout = DataLayout.from_settings(settings)
    items = np.unique(pairs["item_id"].to_numpy())
    write_partition(layout.output(MINED, INFER, "item_stats"), pa.table({
        "item_id": pa.array(items, pa.int64()),
        "popularity": pa.array(np.arange(len(items)) % 7 + 1, pa.int64())}))
    report = infer_cluster_embeddings(spark, settings, INFER, k=4, buckets=3)
    paths = {name: layout.output(EMBEDDINGS, INFER, name)
             for name in ("item_clusters", "cluster", "item_prior")}
    assert report["clusters"] == 3 and report["non_finite"] == report["prior_non_finite"] == 0
    assert report["rows_written"] == report["users"] * 3 > 0
    assert report["items"] == report["item_priors"] == len(items)
    table = read_item_clusters(paths["item_clusters"])
    assert table.item_ids.tolist() == items.tolist()
    recorded = _files(paths["cluster"])[CLUSTERING_MARKER].decode()
    layout_bytes = (table.item_ids.astype("<i8").tobytes()
                    + table.cluster_ids.astype("<i4").tobytes())  # docs/cache-format.md
    assert recorded == hashlib.blake2b(layout_bytes, digest_size=8).hexdigest()
    assert clustering_mismatch(paths["cluster"], table) is None
    before = {name: _files(path) for name, path in paths.items()}
    write_nan_copy(f"{settings.models_root}/foundation", "nan-fallback")
    with pytest.raises(NonFiniteOutputError, match="NaN or infinite") as caught:
        infer_cluster_embeddings(spark, settings, INFER, "nan-fallback", k=4, buckets=3)
    assert caught.value.exit_code == 5
    assert {name: _files(path) for name, path in paths.items()} == before
    # the job skips such a level: its tables go, the exact embeddings stand alone
    skipped = embed_fallback_level(spark, settings.model_copy(update={"fallback_clusters": 4}),
                                   INFER, "nan-fallback")
    assert "NaN or infinite" in skipped["skipped"]
    assert not any(is_complete(path) for path in paths.values())


def test_missing_partition_is_a_clear_error(spark, served):
    settings, *_ = served
    with pytest.raises(MissingPartitionError, match="speculated") as caught:
        run_inference(spark, settings, InferRequest(INFER.shift(INFER.length * 5)))
    assert caught.value.exit_code == 2


def test_some_non_finite_rows_are_rejected_and_counted(spark, served):
    """A model that overflows for one item of some users' histories: exactly the pairs that are
    not finite in fp16 (computed in-process on the per-pair path) are left out, and counted."""
    import torch

    from solaris_lib.model.network import hash_items

    settings, pairs, history, _ = served
    root = f"{settings.models_root}/foundation"
    cfg, state = artefact.load_state(artefact.version_dir(root, artefact.serving_version(root)))
    item = history.column("item_ids")[0].as_py()[-1]  # in the first user's history
    rows = hash_items(torch.tensor([item]), cfg.item_buckets, cfg.item_hashes)[0]
    state = {k: v.clone() for k, v in state.items()}
    state["items.table.weight"][rows] = 1e30
    artefact.write_version(root, "overflow-model", state, cfg, {}, {})
    report = run_inference(spark, settings, InferRequest(
        INFER, model_version="overflow-model", max_non_finite_share=1.0))

    embedder = FoundationEmbedder.load(artefact.version_dir(root, "overflow-model"), "cpu")
    want = sorted(set(zip(pairs["user_id"].to_pylist(), pairs["item_id"].to_pylist(),
                          strict=True)))
    users = np.array([u for u, _ in want])
    uniq, counts = np.unique(users, return_counts=True)
    ref, _ = embedder.score_users(EventLists.from_user_history(history), uniq, counts,
                                  np.array([i for _, i in want]), INFER.end, naive=True)
    finite = np.isfinite(ref).all(1) & np.isfinite(ref.astype("<f2")).all(1)
    assert 0 < (~finite).sum() < len(want)
    assert report.non_finite == int((~finite).sum())
    assert report.rows_written == int(finite.sum())
    table = _read(DataLayout.from_settings(settings).output(EMBEDDINGS, INFER))
    kept = [pair for pair, ok in zip(want, finite, strict=True) if ok]
    assert list(zip(table["user_id"].to_pylist(), table["item_id"].to_pylist(),
                    strict=True)) == kept


def test_an_exported_program_runs_batch_inference(spark, served):
    """The serving model handed over as torch.export programs (no class of the model at serving
    time) runs batch inference once its factory is allowed, with the model's own embeddings."""
    from solaris_lib.errors import ConfigError
    from solaris_lib.model.contract import EXPORTED_FACTORY, SHIPPED_FACTORIES
    from solaris_lib.model.exported import export_version

    settings, pairs, history, version = served
    root = f"{settings.models_root}/foundation"
    export_version(artefact.load_model(artefact.version_dir(root, version)), root, "exported")
    with pytest.raises(ConfigError, match="not allowed"):
        run_inference(spark, settings, InferRequest(INFER, model_version="exported"))
    allowed = settings.model_copy(update={
        "model_factories": ",".join((*SHIPPED_FACTORIES, EXPORTED_FACTORY))})
    report = run_inference(spark, allowed, InferRequest(INFER, model_version="exported"))
    table = _read(DataLayout.from_settings(allowed).output(EMBEDDINGS, INFER))
    want = sorted(set(zip(pairs["user_id"].to_pylist(), pairs["item_id"].to_pylist(),
                          strict=True)))
    assert report.rows_written == len(want) == table.num_rows and report.non_finite == 0
    assert set(table["model_version"].to_pylist()) == {"exported"}
    eager = FoundationEmbedder.load(artefact.version_dir(root, version), "cpu")
    decoded, hit, _ = Codec("fp16", eager.dim).decode(table["embedding"].to_pylist())
    users = np.array(table["user_id"].to_pylist())
    uniq, counts = np.unique(users, return_counts=True)
    ref, _ = eager.score_users(EventLists.from_user_history(history), uniq, counts,
                               np.array(table["item_id"].to_pylist()), INFER.end)
    assert hit.all() and np.abs(decoded - ref).max() <= 2e-3 * max(1.0, np.abs(ref).max())
