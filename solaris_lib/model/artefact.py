"""Versioned model artefacts and the ``serving.json`` pointer (no Spark).

A version folder ``<model root>/v=<interval key>-<hash8>/`` holds ``weights.pt`` (the state
dict), ``config.json`` (the model's config, e.g. :class:`FoundationConfig`), ``manifest.json``
(``{"factory": "module:callable"}``: the implementation that builds the model from
``config.json``; folders written before it existed read as the built-in foundation model),
``metrics.json`` and ``window.json`` (the training and held-out windows). :func:`load_model`
builds any allowed :class:`~solaris_lib.model.contract.InteractionModel` from a folder: weights
load with ``weights_only=True`` (never unpickled) and must match the model's keys and shapes. The hash covers the weights and the config, so a deterministic
rerun names the same version. ``<model root>/serving.json`` = ``{"version": ...}`` names the
version that inference serves.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from solaris_lib.errors import ConfigError, SolarisError
from solaris_lib.layout import join
from solaris_lib.model.config import FoundationConfig
from solaris_lib.model.contract import FOUNDATION_FACTORY, SHIPPED_FACTORIES
from solaris_lib.storage import (
    atomic_folder,
    exists,
    filesystem,
    is_complete,
    read_text,
    write_text,
)

WEIGHTS, CONFIG, MANIFEST, METRICS, WINDOW, SERVING = (
    "weights.pt", "config.json", "manifest.json", "metrics.json", "window.json", "serving.json")
_VERSION_DIR = re.compile(r"(?:^|/)v=([A-Za-z0-9_.+-]+)/?$")


class ModelNotFoundError(SolarisError):
    """No model version where one was asked for (missing folder, no serving version)."""

    exit_code = 2


class ArtefactMismatchError(SolarisError):
    """The weights of a version folder do not fit the model its manifest names."""

    exit_code = 2


def read_json(path: str) -> dict:
    return json.loads(read_text(path))


def weights_digest(state: dict, cfg) -> str:
    """8 hex of a hash over the config and every tensor's name, shape, dtype and bytes."""
    h = hashlib.blake2b(digest_size=4)
    h.update(cfg.to_json().encode())
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        h.update(tensor.numpy().tobytes())
    return h.hexdigest()


def version_dir(model_root: str, version: str) -> str:
    return join(model_root, f"v={version}")


def write_version(model_root: str, version: str, state: dict, cfg, metrics: dict, window: dict,
                  *, factory: str = FOUNDATION_FACTORY) -> str:
    """Write one version folder atomically (replacing a previous copy); returns its path.
    ``cfg`` has ``to_json()``; ``factory`` (``module:callable``) builds the model from it."""
    import io

    import torch

    final = version_dir(model_root, version)
    with atomic_folder(final) as staging:
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in state.items()}, buf)
        fs, inner = filesystem(join(staging, WEIGHTS))
        with fs.open_output_stream(inner) as stream:
            stream.write(buf.getvalue())
        write_text(join(staging, CONFIG), cfg.to_json())
        write_text(join(staging, MANIFEST), json.dumps({"factory": factory}, indent=2))
        write_text(join(staging, METRICS), json.dumps(metrics, sort_keys=True, indent=2))
        write_text(join(staging, WINDOW), json.dumps(window, sort_keys=True, indent=2))
    return final


def load_weights(folder: str) -> dict:
    """The state dict of ``weights.pt`` on CPU: tensors only (``weights_only=True``)."""
    import io

    import torch

    fs, inner = filesystem(join(folder, WEIGHTS))
    with fs.open_input_stream(inner) as stream:
        try:
            state = torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises UnpicklingError / RuntimeError variants
            raise ArtefactMismatchError(f"{folder}/{WEIGHTS} is not a plain state dict of "
                                        f"tensors: {err}") from err
    if not isinstance(state, dict):
        raise ArtefactMismatchError(f"{folder}/{WEIGHTS} holds a {type(state).__name__}, not "
                                    "a state dict")
    return state


def load_state(folder: str) -> tuple[FoundationConfig, dict]:
    """(config, state dict on CPU) of a foundation-model version folder."""
    if not is_complete(folder):
        raise ModelNotFoundError(f"no complete model version at {folder}")
    return FoundationConfig.from_dict(read_json(join(folder, CONFIG))), load_weights(folder)


def manifest(folder: str) -> dict:
    """``manifest.json`` of a version folder; ``{"factory": FOUNDATION_FACTORY}`` for folders
    written before manifests existed."""
    path = join(folder, MANIFEST)
    return read_json(path) if exists(path) else {"factory": FOUNDATION_FACTORY}


def resolve_factory(name: str, allowed):
    """The ``module:callable`` model factory ``name``, if it is among ``allowed``."""
    import importlib

    if name not in allowed:
        raise ConfigError(
            f"model factory {name!r} is not allowed; allowed: {', '.join(allowed) or 'none'} "
            "(add it to SOLARIS_MODEL_FACTORIES to load it)")
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"model factory {name!r} cannot be imported: {err}") from err


def check_factory(folder: str, factories) -> str:
    """The factory ``folder``'s manifest names; :class:`ConfigError` unless it is allowed."""
    name = manifest(folder).get("factory", FOUNDATION_FACTORY)
    if name not in tuple(factories):
        resolve_factory(name, tuple(factories))
    return name


def check_state(model, state: dict, where: str) -> None:
    """Raise :class:`ArtefactMismatchError` naming every missing, unexpected or mis-shaped key
    of ``state`` against ``model.state_dict()``."""
    want = model.state_dict()
    missing = sorted(set(want) - set(state))
    unexpected = sorted(set(state) - set(want))
    shapes = [f"{k}: weights {tuple(state[k].shape)}, model {tuple(want[k].shape)}"
              for k in sorted(set(want) & set(state))
              if not hasattr(state[k], "shape") or tuple(state[k].shape) != tuple(want[k].shape)]
    problems = [f"missing {missing}" if missing else "",
                f"unexpected {unexpected}" if unexpected else "",
                f"wrong shapes [{'; '.join(shapes)}]" if shapes else ""]
    if any(problems):
        raise ArtefactMismatchError(
            f"the weights of {where} do not fit the model its manifest names: "
            + ", ".join(p for p in problems if p))


def load_model(folder: str, version: str | None = None, *,
               factories=SHIPPED_FACTORIES):
    """The :class:`~solaris_lib.model.contract.InteractionModel` of a version folder, on CPU in
    ``eval()`` mode, its ``version`` set (default: the folder's ``v=`` name).

    ``factories``: the allowed ``module:callable`` names (the ``SOLARIS_MODEL_FACTORIES``
    setting); a manifest naming another one is a :class:`ConfigError`, weights that do not fit
    the built model an :class:`ArtefactMismatchError`. A factory with ``reads_folder = True``
    (an exported program) is called as ``factory(config, folder)`` and reads its own files."""
    from solaris_lib.model.contract import InteractionModel

    if not is_complete(folder):
        raise ModelNotFoundError(f"no complete model version at {folder}")
    name = manifest(folder).get("factory", FOUNDATION_FACTORY)
    build = resolve_factory(name, tuple(factories))
    reads_folder = getattr(build, "reads_folder", False)
    config = read_json(join(folder, CONFIG))
    model = build(config, folder) if reads_folder else build(config)
    if not isinstance(model, InteractionModel):
        raise ConfigError(f"model factory {name!r} built a {type(model).__name__}, which lacks "
                          "the InteractionModel contract (dim, version, max_history, "
                          "max_clicks, encode, embed, to, eval)")
    if not reads_folder:
        state = load_weights(folder)
        check_state(model, state, folder)
        model.load_state_dict(state)
    if version is None:
        match = _VERSION_DIR.search(folder.rstrip("/"))
        version = match.group(1) if match else folder.rstrip("/").rsplit("/", 1)[-1]
    model.version = version
    return model.eval()


def serving_version(model_root: str) -> str | None:
    """The version named by ``serving.json``, or None when nothing is served yet."""
    path = join(model_root, SERVING)
    return read_json(path)["version"] if exists(path) else None


def set_serving(model_root: str, version: str) -> None:
    """Point ``serving.json`` at ``version`` (written to a temporary name, then moved)."""
    fs, inner = filesystem(join(model_root, SERVING))
    tmp = f"{inner}.tmp"
    with fs.open_output_stream(tmp) as stream:
        stream.write(json.dumps({"version": version}).encode())
    fs.move(tmp, inner)


def resolve(model_root_or_version_dir: str, version: str | None = None) -> tuple[str, str]:
    """(version folder, version) from a version folder, or a model root (+ optional version;
    default: the serving one)."""
    path = model_root_or_version_dir.rstrip("/")
    match = _VERSION_DIR.search(path)
    if match and version is None:
        return path, match.group(1)
    if version is None:
        version = serving_version(path)
        if version is None:
            raise ModelNotFoundError(
                f"no serving model under {path} (no {SERVING}); train one with "
                "`solaris train-foundation` or pass a version")
    folder = version_dir(path, version)
    if not is_complete(folder):
        raise ModelNotFoundError(f"model version {version!r} not found under {path}")
    return folder, version


@dataclass(frozen=True)
class VersionInfo:
    version: str
    folder: str
    metrics: dict
    window: dict


def list_versions(model_root: str) -> list[VersionInfo]:
    """Every complete version under ``model_root``, sorted by version."""
    import pyarrow.fs as pafs

    fs, inner = filesystem(model_root)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return []
    out = []
    for info in fs.get_file_info(pafs.FileSelector(inner)):
        name = info.path.rstrip("/").rsplit("/", 1)[-1]
        if info.type != pafs.FileType.Directory or not name.startswith("v="):
            continue
        folder = join(model_root, name)
        if is_complete(folder):
            out.append(VersionInfo(name[2:], folder, read_json(join(folder, METRICS)),
                                   read_json(join(folder, WINDOW))))
    return sorted(out, key=lambda v: v.version)


def check_version_name(version: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.+=-]{1,128}", version):
        raise ConfigError(f"not a model version name: {version!r}")
    return version
