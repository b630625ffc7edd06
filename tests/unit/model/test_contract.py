"""Both shipped models and their exported programs through the same InteractionModel checks,
and the artefact loader's refusals (factory not allowed, manifest and weights that disagree,
pickles)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from solaris_lib.config import load_settings  # noqa: E402
from solaris_lib.errors import ConfigError  # noqa: E402
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA  # noqa: E402
from solaris_lib.model import artefact  # noqa: E402
from solaris_lib.model.config import FoundationConfig  # noqa: E402
from solaris_lib.model.contract import (  # noqa: E402
    EXPORTED_FACTORY,
    FOUNDATION_FACTORY,
    SHIPPED_FACTORIES,
    TWO_TOWER_FACTORY,
    InteractionModel,
    naive_embed,
)
from solaris_lib.model.examples import build_examples  # noqa: E402
from solaris_lib.model.network import FoundationNet  # noqa: E402
from solaris_lib.model.online import FoundationEmbedder  # noqa: E402
from solaris_lib.model.train import fit  # noqa: E402
from solaris_lib.model.two_tower import TwoTowerConfig, TwoTowerNet  # noqa: E402

FACTORY = {"foundation": FOUNDATION_FACTORY, "two_tower": TWO_TOWER_FACTORY}


def _model(name: str):
    """A shipped model with random (seeded) weights: the FM's zero-initialised item rows get
    noise too, so targets matter."""
    torch.manual_seed(5)
    net = (FoundationNet(FoundationConfig.preset("test")) if name == "foundation"
           else TwoTowerNet(TwoTowerConfig.preset("test")))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return net.eval()


@pytest.fixture(params=["foundation", "two_tower"])
def model(request):
    return request.param, _model(request.param)


ALLOW_EXPORTED = (*SHIPPED_FACTORIES, EXPORTED_FACTORY)
_EXPORTED: dict[str, str] = {}


def _exported_folder(name: str, tmp_path_factory) -> str:
    """The folder of ``_model(name)`` exported with torch.export (once per test session)."""
    from solaris_lib.model.exported import export_version

    if name not in _EXPORTED:
        root = str(tmp_path_factory.mktemp("exported") / "foundation")
        _EXPORTED[name] = export_version(_model(name), root, f"exported-{name}")
    return _EXPORTED[name]


@pytest.fixture(params=["foundation", "two_tower", "exported:foundation", "exported:two_tower"])
def any_model(request, tmp_path_factory):
    """Each shipped model, and each loaded back from its exported programs."""
    kind, _, name = request.param.rpartition(":")
    if not kind:
        return name, _model(name)
    folder = _exported_folder(name, tmp_path_factory)
    return request.param, artefact.load_model(folder, factories=ALLOW_EXPORTED)


def _inputs(b: int = 5, length: int = 12, t: int = 7, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    items = torch.randint(0, 10**12, (b, length), generator=g)
    clicks = torch.randint(0, 3, (b, length), generator=g)
    gaps = torch.rand(b, length, generator=g) * 86400 * 3
    mask = torch.rand(b, length, generator=g) > 0.3
    mask[0] = False  # an empty history
    mask[1] = True
    items[2, :3] = items[3, 0]  # repeated and shared items
    targets = torch.randint(0, 10**12, (b, t), generator=g)
    targets[:, 0] = items[:, -1]  # a target the user has seen
    return items, clicks, gaps, mask, targets


def test_both_models_and_the_embedder_fit_the_contract(any_model):
    _, net = any_model
    assert isinstance(net, InteractionModel)
    assert isinstance(FoundationEmbedder(net, "v", "cpu"), InteractionModel)
    assert not isinstance(object(), InteractionModel)


def test_shared_history_equals_per_pair(any_model):
    _, net = any_model
    args = _inputs()
    with torch.inference_mode():
        emb, logit = net.embed(net.encode(*args[:4]), args[4])
        emb_n, logit_n = naive_embed(net, *args, chunk=6)
    assert emb.shape == (5, 7, net.dim) and emb.dtype == torch.float32
    assert logit.shape == (5, 7) and logit.dtype == torch.float32
    assert torch.isfinite(emb).all() and torch.isfinite(logit).all()
    assert (emb - emb_n).abs().max().item() <= 1e-4
    assert (logit - logit_n).abs().max().item() <= 1e-4


def test_batch_invariance_and_determinism(any_model):
    """A user's outputs do not depend on the other users of the batch, its position in it, extra
    padding slots, or padded targets; two runs give the same numbers."""
    _, net = any_model
    items, clicks, gaps, mask, targets = _inputs()
    with torch.inference_mode():
        emb, logit = net.embed(net.encode(items, clicks, gaps, mask), targets)
        again, _ = net.embed(net.encode(items, clicks, gaps, mask), targets)
        assert torch.equal(emb, again)
        perm = torch.tensor([3, 0, 4, 2, 1])
        emb_p, logit_p = net.embed(net.encode(items[perm], clicks[perm], gaps[perm], mask[perm]),
                                   targets[perm])
        assert (emb_p - emb[perm]).abs().max().item() <= 1e-5
        assert (logit_p - logit[perm]).abs().max().item() <= 1e-5
        for k in range(5):
            pad = 4  # extra masked history slots in front, a padded target after
            sl = slice(k, k + 1)
            h = [torch.cat([torch.full((1, pad), fill, dtype=x.dtype), x[sl]], 1)
                 for x, fill in ((items, 7), (clicks, 1), (gaps, 5.0))]
            m = torch.cat([torch.zeros(1, pad, dtype=torch.bool), mask[sl]], 1)
            tgt = torch.cat([targets[sl], torch.tensor([[123]])], 1)
            one, one_logit = net.embed(net.encode(*h, m), tgt)
            assert (one[:, :7] - emb[sl]).abs().max().item() <= 1e-5
            assert (one_logit[:, :7] - logit[sl]).abs().max().item() <= 1e-5


def _write(tmp_path, name: str, net, version: str = "20260105T000000Z-abc", **kw) -> str:
    state = net.state_dict()
    return artefact.write_version(str(tmp_path / "foundation"), version, state, net.cfg, {}, {},
                                  factory=FACTORY[name], **kw)


def test_artefact_names_its_factory_and_reloads_identically(tmp_path, model):
    name, net = model
    folder = _write(tmp_path, name, net)
    assert json.loads(open(os.path.join(folder, artefact.MANIFEST)).read()) == {
        "factory": FACTORY[name]}
    loaded = artefact.load_model(folder)
    assert type(loaded) is type(net) and loaded.version == "20260105T000000Z-abc"
    assert not loaded.training
    args = _inputs()
    with torch.inference_mode():
        want = net.embed(net.encode(*args[:4]), args[4])
        got = loaded.embed(loaded.encode(*args[:4]), args[4])
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    embedder = FoundationEmbedder.load(folder, "cpu", factories=SHIPPED_FACTORIES)
    assert embedder.version == "20260105T000000Z-abc" and embedder.dim == net.dim


def test_a_factory_not_allowed_is_refused(tmp_path, model):
    name, net = model
    folder = _write(tmp_path, name, net)
    other = tuple(f for f in SHIPPED_FACTORIES if f != FACTORY[name])
    with pytest.raises(ConfigError, match="not allowed.*SOLARIS_MODEL_FACTORIES"):
        artefact.load_model(folder, factories=other)
    with pytest.raises(ConfigError, match="not allowed"):
        FoundationEmbedder.load(folder, "cpu", factories=other)
    with pytest.raises(ConfigError, match="not allowed"):
        artefact.check_factory(folder, other)
    assert artefact.check_factory(folder, SHIPPED_FACTORIES) == FACTORY[name]


def test_a_manifest_naming_anything_else_is_refused_before_import(tmp_path):
    folder = _write(tmp_path, "two_tower", _model("two_tower"))
    with open(os.path.join(folder, artefact.MANIFEST), "w") as f:
        json.dump({"factory": "os:system"}, f)
    with pytest.raises(ConfigError, match="'os:system' is not allowed"):
        artefact.load_model(folder)


def test_manifest_and_weights_that_disagree_are_refused(tmp_path):
    """Two-tower weights under the FM's manifest, a missing key, a wrong shape."""
    net = _model("two_tower")
    folder = _write(tmp_path, "two_tower", net)
    with open(os.path.join(folder, artefact.MANIFEST), "w") as f:
        json.dump({"factory": FOUNDATION_FACTORY}, f)
    with pytest.raises(ConfigError, match="unknown foundation config keys"):
        artefact.load_model(folder)  # the FM factory rejects the two-tower config
    fm = _model("foundation")
    state = fm.state_dict()
    folder = artefact.write_version(str(tmp_path / "m"), "v1", net.state_dict(), fm.cfg, {}, {})
    with pytest.raises(artefact.ArtefactMismatchError, match="missing.*unexpected"):
        artefact.load_model(folder)
    missing = {k: v for k, v in state.items() if k != "out.weight"}
    folder = artefact.write_version(str(tmp_path / "m"), "v2", missing, fm.cfg, {}, {})
    with pytest.raises(artefact.ArtefactMismatchError, match=r"missing \['out.weight'\]"):
        artefact.load_model(folder)
    bad = {**state, "out.weight": torch.zeros(1, fm.cfg.dim + 1)}
    folder = artefact.write_version(str(tmp_path / "m"), "v3", bad, fm.cfg, {}, {})
    with pytest.raises(artefact.ArtefactMismatchError, match="wrong shapes.*out.weight"):
        artefact.load_model(folder)


def test_weights_are_never_unpickled(tmp_path):
    net = _model("foundation")
    folder = _write(tmp_path, "foundation", net)
    torch.save({"payload": _Pickled()}, os.path.join(folder, artefact.WEIGHTS))
    with pytest.raises(artefact.ArtefactMismatchError, match="not a plain state dict"):
        artefact.load_model(folder)
    assert not _Pickled.loaded


class _Pickled:
    loaded = False

    def __setstate__(self, state):
        type(self).loaded = True


def test_an_artefact_without_manifest_is_the_foundation_model(tmp_path):
    net = _model("foundation")
    folder = _write(tmp_path, "foundation", net)
    os.remove(os.path.join(folder, artefact.MANIFEST))
    assert artefact.manifest(folder) == {"factory": FOUNDATION_FACTORY}
    assert isinstance(artefact.load_model(folder), FoundationNet)


@pytest.mark.parametrize("name", ["foundation", "two_tower"])
def test_an_exported_program_serves_like_its_model(name, tmp_path_factory):
    """No class of the model at serving time: the programs give the eager model's numbers,
    through FoundationEmbedder too; the exported factory must be allowed explicitly."""
    folder = _exported_folder(name, tmp_path_factory)
    with pytest.raises(ConfigError, match="not allowed"):
        artefact.load_model(folder)  # not among the default factories
    eager = FoundationEmbedder(_model(name), "v", "cpu")
    served = FoundationEmbedder.load(folder, "cpu", factories=ALLOW_EXPORTED)
    assert type(served.net).__name__ == "ExportedModel" and served.version == f"exported-{name}"
    rng = np.random.default_rng(0)
    asof = datetime(2026, 1, 8, tzinfo=UTC)
    events = _events(rng, asof)
    users, counts = np.array([0, 2, 99]), np.array([3, 1, 2])  # 99: no history
    items = rng.integers(0, 60, 6)
    want, want_logit = eager.score_users(events, users, counts, items, asof)
    got, got_logit = served.score_users(events, users, counts, items, asof)
    assert np.abs(got - want).max() <= 1e-5 and np.abs(got_logit - want_logit).max() <= 1e-5


def _events(rng, asof):
    from solaris_lib.model.examples import EventLists

    n, asof_us = 120, int(asof.timestamp() * 1e6)
    return EventLists.from_events(rng.integers(0, 5, n), rng.integers(0, 60, n),
                                  asof_us - rng.integers(1, 10**11, n), rng.integers(0, 3, n))


def test_an_exported_program_whose_weights_disagree_is_refused(tmp_path):
    from solaris_lib.model.exported import export_version

    folder = export_version(_model("two_tower"), str(tmp_path / "m"), "v1")
    path = os.path.join(folder, artefact.WEIGHTS)
    tensors = torch.load(path, weights_only=True)
    tensors.pop(next(k for k in tensors if k.startswith("embed.state/")))
    torch.save(tensors, path)
    with pytest.raises(artefact.ArtefactMismatchError, match="embed program.*does not load"):
        artefact.load_model(folder, factories=ALLOW_EXPORTED)


def test_the_setting_lists_the_allowed_factories():
    assert load_settings().allowed_model_factories == SHIPPED_FACTORIES
    settings = load_settings(model_factories=f" {TWO_TOWER_FACTORY} ,")
    assert settings.allowed_model_factories == (TWO_TOWER_FACTORY,)
    with pytest.raises(ConfigError, match="module:callable"):
        load_settings(model_factories="solaris_lib.model.two_tower")


def _planted_log(seed: int = 0) -> pa.Table:
    """Even items are clicked 60 % of the time, odd ones 5 %."""
    rng = np.random.default_rng(seed)
    t0 = datetime(2026, 1, 5, tzinfo=UTC)
    rows = []
    for r in range(400):
        ts = t0 + timedelta(minutes=int(rng.integers(0, 3000)))
        user = int(rng.integers(0, 30))
        for k in range(4):
            item = int(rng.integers(0, 40))
            clicked = bool(rng.random() < (0.6 if item % 2 == 0 else 0.05))
            rows.append((f"r{r}", ts, user, item, k, clicked))
    cols = list(zip(*rows, strict=True))
    return pa.table(dict(zip(REQUEST_LOG_SCHEMA.names, cols, strict=True)),
                    schema=REQUEST_LOG_SCHEMA)


def test_the_two_tower_model_trains_with_the_shared_train_loop():
    from solaris_lib.evaluation import metrics
    from solaris_lib.model.train import predict

    torch.set_num_threads(1)
    examples = build_examples(_planted_log())
    cfg = TwoTowerConfig.preset("test", epochs=4, batch_requests=32, patience=4)
    net, curve = fit(cfg, examples, device="cpu")
    assert type(net) is TwoTowerNet  # the config picks the network
    assert [c.epoch for c in curve] == [1, 2, 3, 4]
    assert curve[-1].train_loss < curve[0].train_loss
    logits = predict(net, examples)
    assert np.isfinite(logits).all()
    assert metrics.roc_auc(examples.t_labels, logits) > 0.75


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["foundation", "two_tower"])
def test_on_cuda_fp32_matches_cpu_and_bf16_stays_close(name):
    """The GPU path (pinned host memory, bf16 autocast by default) against CPU fp32."""
    rng = np.random.default_rng(1)
    asof = datetime(2026, 1, 8, tzinfo=UTC)
    events = _events(rng, asof)
    users, counts = np.array([0, 1, 2, 99]), np.array([5, 3, 1, 2])
    items = rng.integers(0, 60, int(counts.sum()))
    want, want_logit = FoundationEmbedder(_model(name), "v", "cpu").score_users(
        events, users, counts, items, asof)
    fp32, fp32_logit = FoundationEmbedder(_model(name), "v", "cuda", autocast=False).score_users(
        events, users, counts, items, asof)
    bf16, _ = FoundationEmbedder(_model(name), "v", "cuda").score_users(
        events, users, counts, items, asof)
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(fp32 - want).max() <= 1e-4 * scale
    assert np.abs(fp32_logit - want_logit).max() <= 1e-4 * max(1.0, np.abs(want_logit).max())
    assert np.isfinite(bf16).all() and np.abs(bf16 - want).max() <= 5e-2 * scale
