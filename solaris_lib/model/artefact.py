"""Versioned model artefacts and the ``serving.json`` pointer (no Spark).

A version folder ``<model root>/v=<interval key>-<hash8>/`` holds ``weights.pt`` (the state
dict), ``config.json`` (:class:`FoundationConfig`), ``metrics.json`` and ``window.json`` (the
training and held-out windows). The hash covers the weights and the config, so a deterministic
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
from solaris_lib.storage import atomic_folder, exists, filesystem, is_complete

WEIGHTS, CONFIG, METRICS, WINDOW, SERVING = (
    "weights.pt", "config.json", "metrics.json", "window.json", "serving.json")
_VERSION_DIR = re.compile(r"(?:^|/)v=([A-Za-z0-9_.+-]+)/?$")


class ModelNotFoundError(SolarisError):
    """No model version where one was asked for (missing folder, no serving version)."""

    exit_code = 2


def _read_text(path: str) -> str:
    fs, inner = filesystem(path)
    with fs.open_input_stream(inner) as stream:
        return stream.read().decode()


def _write_text(path: str, text: str) -> None:
    fs, inner = filesystem(path)
    with fs.open_output_stream(inner) as stream:
        stream.write(text.encode())


def read_json(path: str) -> dict:
    return json.loads(_read_text(path))


def weights_digest(state: dict, cfg: FoundationConfig) -> str:
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


def write_version(model_root: str, version: str, state: dict, cfg: FoundationConfig,
                  metrics: dict, window: dict) -> str:
    """Write one version folder atomically (replacing a previous copy); returns its path."""
    import io

    import torch

    final = version_dir(model_root, version)
    with atomic_folder(final) as staging:
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in state.items()}, buf)
        fs, inner = filesystem(join(staging, WEIGHTS))
        with fs.open_output_stream(inner) as stream:
            stream.write(buf.getvalue())
        _write_text(join(staging, CONFIG), cfg.to_json())
        _write_text(join(staging, METRICS), json.dumps(metrics, sort_keys=True, indent=2))
        _write_text(join(staging, WINDOW), json.dumps(window, sort_keys=True, indent=2))
    return final


def load_state(folder: str) -> tuple[FoundationConfig, dict]:
    """(config, state dict on CPU) of a version folder."""
    import io

    import torch

    if not is_complete(folder):
        raise ModelNotFoundError(f"no complete model version at {folder}")
    cfg = FoundationConfig.from_dict(read_json(join(folder, CONFIG)))
    fs, inner = filesystem(join(folder, WEIGHTS))
    with fs.open_input_stream(inner) as stream:
        state = torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)
    return cfg, state


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
