"""A copy of the serving foundation model whose outputs are NaN (the bad artefact of fault tests)."""

from __future__ import annotations


def write_nan_copy(model_root: str, name: str) -> str:
    """Write version ``name``: the serving version's weights with NaN output layers (it is not
    promoted). Returns the serving version it copied."""
    from solaris_lib.model import artefact

    good = artefact.serving_version(model_root)
    cfg, state = artefact.load_state(artefact.version_dir(model_root, good))
    state = {k: v.clone() for k, v in state.items()}
    for key in [k for k in state if k.startswith(("head.", "out.")) and k.endswith("weight")]:
        state[key].fill_(float("nan"))  # every layer that makes the embedding and the logit
    artefact.write_version(model_root, name, state, cfg, {}, {})
    return good
