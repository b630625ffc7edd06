"""Foundation-model inference: pairs/s of the shared-history path against the naive path.

``--model foundation`` (default) or ``two_tower``: any shipped
:class:`~solaris_lib.model.contract.InteractionModel`, run through the contract (``encode``
once per user, then ``embed``; the naive path is ``contract.naive_embed``).
Both paths run the same weights (``default`` preset, random init, eval mode) on the same
inputs: ``--users`` users with a full history of ``--history`` events and ``--items`` target
items each. The shared path encodes each history once and lets its targets attend to it; the
naive path re-encodes the history for every pair. Also measured: one user's 200-item online
call (the reason the model cannot be served inside a request). ``max_abs_diff`` compares the
two paths' fp32 embeddings (on CUDA both paths also run under bf16 autocast and the fp32
difference is measured separately). ``flops_per_pair``: the shared path's FLOPs per pair, as
torch counts them (what a GPU's rate can be estimated from). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from solaris_lib.model.contract import naive_embed

MODELS = ("foundation", "two_tower")


def build(model: str, preset: str):
    """A shipped model of ``preset`` with random (seeded) weights, dropout off."""
    torch.manual_seed(0)
    if model == "two_tower":
        from solaris_lib.model.two_tower import TwoTowerConfig, TwoTowerNet

        return TwoTowerNet(TwoTowerConfig.preset(preset, dropout=0.0))
    from solaris_lib.model.config import FoundationConfig
    from solaris_lib.model.network import FoundationNet

    return FoundationNet(FoundationConfig.preset(preset, dropout=0.0))


def shared(net, items, clicks, gaps, mask, targets):
    """The shared-history path of the contract."""
    return net.embed(net.encode(items, clicks, gaps, mask), targets)


def inputs(users: int, history: int, items: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    tensors = (torch.randint(0, 10**9, (users, history), generator=g),
               torch.randint(0, 3, (users, history), generator=g),
               torch.rand(users, history, generator=g) * 7 * 86400,
               torch.ones(users, history, dtype=torch.bool),
               torch.randint(0, 10**9, (users, items), generator=g))
    return tuple(t.to(device) for t in tensors)


def timed(fn, repeats: int, device) -> tuple[float, object]:
    """Best wall time of ``repeats`` calls (after one warm-up), and the last result."""
    out = fn()
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return best, out


def flops_per_pair(net, x, pairs: int) -> float:
    """FLOPs of one shared-path forward over ``x`` per pair (torch's counter: matmuls and
    attention, 2 per multiply-add), independent of the device that will run it."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        shared(net, *x)
    return counter.get_total_flops() / pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="foundation")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--history", type=int, default=100)
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    net = build(args.model, args.preset).to(device).eval()
    x = inputs(args.users, args.history, args.items, device)
    online = inputs(1, net.max_history, 200, device, seed=1)  # one user, full history
    pairs = args.users * args.items
    result = {"model": args.model, "preset": args.preset, "device": str(device), "threads": torch.get_num_threads(),
              "users": args.users, "history": args.history, "items_per_user": args.items}
    for precision in (["fp32", "bf16"] if device.type == "cuda" else ["fp32"]):
        with torch.inference_mode(), torch.autocast(device.type, torch.bfloat16,
                                                    enabled=precision == "bf16"):
            shared_s, (emb_s, _) = timed(lambda: shared(net, *x), args.repeats, device)
            naive_s, (emb_n, _) = timed(lambda: naive_embed(net, *x, chunk=1024), 1, device)
            online_s, _ = timed(lambda: shared(net, *online), args.repeats, device)
        suffix = "" if precision == "fp32" else "_bf16"
        result.update({
            f"pairs_per_s_shared{suffix}": round(pairs / shared_s, 1),
            f"pairs_per_s_naive{suffix}": round(pairs / naive_s, 1),
            f"speedup{suffix}": round(naive_s / shared_s, 2),
            f"max_abs_diff{suffix}": float((emb_s.float() - emb_n.float()).abs().max()),
            f"online_200_items_ms{suffix}": round(online_s * 1e3, 2),
        })
    result["flops_per_pair"] = round(flops_per_pair(net, x, pairs))
    result["embedding_abs_max"] = float(np.abs(emb_s.float().cpu().numpy()).max())
    result["targets_met"] = result["speedup"] >= 5 and result["max_abs_diff"] <= 1e-4
    print(json.dumps(result))


if __name__ == "__main__":
    main()
