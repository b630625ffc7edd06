"""Exported models: a ``torch.export`` program pair that serves with no Python class of its own.

A team that hands over its model as programs, not code, exports the contract's two methods
(:class:`~solaris_lib.model.contract.InteractionModel`) with dynamic batch, history and target
sizes (any >= 1) and writes them as an artefact with :func:`export_version`::

    v=<version>/manifest.json   {"factory": "solaris_lib.model.exported:exported_program"}
    v=<version>/config.json     {"dim", "max_history", "max_clicks", "state": [ranks]}
    v=<version>/encode.json     the encode graph (torch.export's JSON serialisation)
    v=<version>/embed.json      the embed graph
    v=<version>/weights.pt      every parameter, buffer and tensor constant of both programs
                                ("encode.state/<name>", "encode.const/<name>", "embed...")

Loading never unpickles: ``weights.pt`` loads with ``weights_only=True`` and the graphs are
JSON (``torch.export.load`` would unpickle, so it is not used). The serialisation API is
torch's ``torch._export.serde.serialize`` (private; pinned by ``tests/unit/model/
test_contract.py``). Export in ``eval()`` mode on the device that will serve (a program may
hold device constants); only CPU is tested.

The factory is not in the default ``SOLARIS_MODEL_FACTORIES``: add
``solaris_lib.model.exported:exported_program`` to serve exported programs.
"""

from __future__ import annotations

import io
import json

import torch

from solaris_lib.layout import join
from solaris_lib.model import artefact
from solaris_lib.model.contract import EXPORTED_FACTORY
from solaris_lib.storage import atomic_folder, read_bytes, write_bytes

ENCODE, EMBED = "encode", "embed"
_EXAMPLE_B, _EXAMPLE_L, _EXAMPLE_T = 13, 17, 19  # sizes no model dimension is likely to share


class _Encode(torch.nn.Module):
    def __init__(self, net) -> None:
        super().__init__()
        self.net = net

    def forward(self, items, clicks, gaps, mask):
        return tuple(self.net.encode(items, clicks, gaps, mask))


class _Embed(torch.nn.Module):
    def __init__(self, net, state_type) -> None:
        super().__init__()
        self.net, self.state_type = net, state_type

    def forward(self, state, targets):
        return self.net.embed(self.state_type(*state), targets)


def _examples():
    g = torch.Generator().manual_seed(0)
    b, n, t = _EXAMPLE_B, _EXAMPLE_L, _EXAMPLE_T
    history = (torch.randint(0, 10**9, (b, n), generator=g),
               torch.randint(0, 3, (b, n), generator=g),
               torch.rand(b, n, generator=g) * 7 * 86400,
               torch.rand(b, n, generator=g) > 0.3)
    return history, torch.randint(0, 10**9, (b, t), generator=g)


def export_programs(net):
    """(encode program, embed program) of a contract model whose ``encode`` returns a
    NamedTuple (or tuple) of tensors; dynamic B, L and T (each >= 1)."""
    from torch.export import Dim, export

    net = net.eval()
    b, n, t = Dim("B", min=1), Dim("L", min=1), Dim("T", min=1)
    history, targets = _examples()
    with torch.no_grad():
        state = net.encode(*history)
    hist_dims = {k: {0: b, 1: n} for k in ("items", "clicks", "gaps", "mask")}
    sizes = {_EXAMPLE_B: b, _EXAMPLE_L: n}
    state_dims = tuple({i: sizes[s] for i, s in enumerate(x.shape) if s in sizes} or None
                       for x in state)
    encode = export(_Encode(net), history, dynamic_shapes=hist_dims)
    embed = export(_Embed(net, type(state)), (tuple(state), targets),
                   dynamic_shapes=(state_dims, {0: b, 1: t}))
    return encode, embed


def _flatten(program) -> tuple[bytes, dict]:
    """(graph JSON, tensors "state/<name>" and "const/<name>") of an exported program."""
    from torch._export.serde.serialize import serialize

    art = serialize(program, serialize_example_inputs=False)
    tensors = {}
    for kind, blob in (("state", art.state_dict), ("const", art.constants)):
        loaded = torch.load(io.BytesIO(blob), weights_only=True) if blob else {}
        tensors.update({f"{kind}/{k}": v for k, v in loaded.items()})
    return art.exported_program, tensors


def export_version(net, model_root: str, version: str, metrics: dict | None = None,
                   window: dict | None = None) -> str:
    """Export ``net`` (any contract model) and write it as version ``version`` of
    ``model_root`` (atomically); returns the folder."""
    encode, embed = export_programs(net)
    graphs, tensors = {}, {}
    for name, program in ((ENCODE, encode), (EMBED, embed)):
        graphs[name], flat = _flatten(program)
        tensors.update({f"{name}.{k}": v for k, v in flat.items()})
    history, _ = _examples()
    with torch.no_grad():
        state = net.encode(*history)
    config = {"dim": net.dim, "max_history": net.max_history, "max_clicks": net.max_clicks,
              "state": [x.dim() for x in state]}
    final = artefact.version_dir(model_root, version)
    with atomic_folder(final) as staging:
        buf = io.BytesIO()
        torch.save(tensors, buf)
        write_bytes(join(staging, artefact.WEIGHTS), buf.getvalue())
        for name, graph in graphs.items():
            write_bytes(join(staging, f"{name}.json"), graph)
        for name, value in ((artefact.CONFIG, config),
                            (artefact.MANIFEST, {"factory": EXPORTED_FACTORY}),
                            (artefact.METRICS, metrics or {}), (artefact.WINDOW, window or {})):
            write_bytes(join(staging, name), json.dumps(value, indent=2).encode())
    return final


class ExportedModel:
    """An :class:`~solaris_lib.model.contract.InteractionModel` over two exported programs."""

    version = "unversioned"

    def __init__(self, config: dict, encode, embed) -> None:
        self.config = config
        self._encode, self._embed = encode, embed

    @property
    def dim(self) -> int:
        return int(self.config["dim"])

    @property
    def max_history(self) -> int:
        return int(self.config["max_history"])

    @property
    def max_clicks(self) -> int:
        return int(self.config["max_clicks"])

    def encode(self, items, clicks, gaps, mask) -> tuple:
        return self._encode(items, clicks, gaps, mask)

    def embed(self, state, targets):
        return self._embed(tuple(state), targets)

    def to(self, device) -> ExportedModel:
        """Moves the programs' weights (untested off CPU: export on the serving device)."""
        self._encode, self._embed = self._encode.to(device), self._embed.to(device)
        return self

    def eval(self) -> ExportedModel:
        return self  # exported in eval mode


def exported_program(config: dict, folder: str) -> ExportedModel:
    """The artefact factory (``solaris_lib.model.exported:exported_program``): reads the graphs
    and ``weights.pt`` (``weights_only=True``) of ``folder``."""
    from torch._export.serde.serialize import SerializedArtifact, deserialize

    tensors = artefact.load_weights(folder)
    programs = {}
    for name in (ENCODE, EMBED):
        try:
            graph = read_bytes(join(folder, f"{name}.json"))
        except (FileNotFoundError, OSError) as err:
            raise artefact.ArtefactMismatchError(f"{folder} has no {name}.json: {err}") from err
        parts = {kind: {k.split("/", 1)[1]: v for k, v in tensors.items()
                        if k.startswith(f"{name}.{kind}/")} for kind in ("state", "const")}
        try:
            program = deserialize(SerializedArtifact(graph, parts["state"], parts["const"], b""))
        except Exception as err:  # torch raises many kinds here: missing or mis-shaped tensors
            raise artefact.ArtefactMismatchError(
                f"the {name} program of {folder} does not load with its weights: {err}") from err
        programs[name] = program.module()
    return ExportedModel(config, programs[ENCODE], programs[EMBED])


exported_program.reads_folder = True  # artefact.load_model passes the folder, skips weights.pt
