"""Train the foundation model on a window of request logs, evaluate it, version and promote it.

Window ``[S, E)``: the model trains on requests in ``[S, E - holdout)`` and is evaluated on
``[E - holdout, E)``; held-out requests see their full history (events before their ``ts``,
including training-window events). An ID-only baseline (:mod:`baseline`) is trained and
evaluated on the same pairs. The new version is promoted (``serving.json``) only when its
held-out log-loss is not worse than the serving version's on the same held-out window.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from solaris_lib.config import SolarisSettings
from solaris_lib.errors import ConfigError, EmptyInputError
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout
from solaris_lib.model import artefact, metrics
from solaris_lib.model.config import FoundationConfig
from solaris_lib.model.examples import Examples, build_examples

log = logging.getLogger(__name__)
MODEL_NAME = "foundation"
LOG_EVERY_S = 10.0


@dataclass(frozen=True)
class TrainRequest:
    """What one training run does (parsed from the job's arguments)."""

    interval: Interval
    holdout: timedelta = timedelta(days=1)
    preset: str = "small"
    epochs: int | None = None
    processes: int = 1
    seed: int = 0
    threads: int = 1  # torch intra-op threads per process (oversubscribed CPUs get slow fast)

    def __post_init__(self) -> None:
        if not timedelta(0) < self.holdout < self.interval.length:
            raise ConfigError(f"holdout {self.holdout} must be positive and shorter than the "
                              f"window {self.interval}")
        if self.processes < 1 or self.threads < 1:
            raise ConfigError(f"--processes and --threads must be >= 1, got {self.processes} "
                              f"and {self.threads}")

    @property
    def holdout_start(self):
        return self.interval.end - self.holdout

    def config(self) -> FoundationConfig:
        overrides = {"seed": self.seed}
        if self.epochs is not None:
            overrides["epochs"] = self.epochs
        return FoundationConfig.preset(self.preset, **overrides)


@dataclass
class TrainReport:
    version: str
    folder: str
    promoted: bool
    serving: str | None
    decision: str
    metrics: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"version": self.version, "folder": self.folder, "promoted": self.promoted,
                "serving": self.serving, "decision": self.decision, "metrics": self.metrics}


def load_examples(logs_root: str, interval: Interval) -> Examples:
    """Examples of every labelled request in ``interval`` (pyarrow reader, validated)."""
    from solaris_lib.logs.reader import read_window

    table = read_window(logs_root, interval).table
    started = time.perf_counter()
    examples = build_examples(table)
    log.info("built %d examples (%d labelled pairs, %d events) from %d rows in %.1f s",
             len(examples), examples.pairs, len(examples.events.items), table.num_rows,
             time.perf_counter() - started)
    return examples


def to_tensors(batch: dict, device) -> dict:
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in batch.items()}


def train_loop(net, cfg: FoundationConfig, train: Examples, *, rank: int = 0, world: int = 1,
               device="cpu") -> None:
    """Epochs of AdamW over request batches; rank ``r`` of ``world`` takes every world-th batch
    (the same count on every rank, as DDP needs)."""
    import torch

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    net.train()
    for epoch in range(cfg.epochs):
        order = rng.permutation(len(train))
        batches = [order[i:i + cfg.batch_requests] for i in range(0, len(order), cfg.batch_requests)]
        mine = (batches[rank::world][: len(batches) // world] if len(batches) >= world
                else batches[:1])
        started, last, seen, total = time.perf_counter(), time.perf_counter(), 0, 0.0
        for rows in mine:
            b = to_tensors(train.batch(rows, cfg.max_history), device)
            _, logits = net(b["items"], b["clicks"], b["gaps"], b["mask"], b["targets"])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits[b["tmask"]], b["labels"][b["tmask"]])
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen, total = seen + len(rows), total + loss.item() * len(rows)
            if time.perf_counter() - last > LOG_EVERY_S:
                last = time.perf_counter()
                log.info("epoch %d: %d/%d requests, %.0f examples/s, loss %.4f", epoch, seen,
                         len(train) // world, seen / (last - started), total / seen)
        elapsed = time.perf_counter() - started
        log.info("epoch %d done (rank %d/%d): %d requests in %.1f s (%.0f examples/s), loss %.4f",
                 epoch, rank, world, seen, elapsed, seen / max(elapsed, 1e-9), total / max(seen, 1))


def fit(cfg: FoundationConfig, train: Examples, device=None):
    """A trained :class:`FoundationNet` (single process, seeded: deterministic on CPU)."""
    import torch

    from solaris_lib.model.network import FoundationNet

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(cfg.seed)
    net = FoundationNet(cfg).to(device)
    train_loop(net, cfg, train, device=device)
    return net.eval().cpu()


def _distributed_worker(cfg: FoundationConfig, train: Examples) -> dict:
    """Runs in each process started by TorchDistributor (torchrun env): DDP over gloo."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from solaris_lib.model.network import FoundationNet

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(cfg.seed)
        net = DistributedDataParallel(FoundationNet(cfg))
        train_loop(net, cfg, train, rank=rank, world=world)
        return {k: v.detach().numpy() for k, v in net.module.state_dict().items()}
    finally:
        dist.destroy_process_group()


def fit_distributed(cfg: FoundationConfig, train: Examples, processes: int):
    """Train with ``processes`` DDP (gloo) workers started by Spark's TorchDistributor."""
    import torch
    from pyspark.ml.torch.distributor import TorchDistributor

    from solaris_lib.model.network import FoundationNet
    from solaris_lib.sparkutil import get_spark

    get_spark("solaris-train-foundation")  # the distributor needs an active session
    state = TorchDistributor(num_processes=processes, local_mode=True, use_gpu=False).run(
        _distributed_worker, cfg, train)
    net = FoundationNet(cfg)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return net.eval()


def predict(net, examples: Examples, max_history: int, batch: int = 512, device=None) -> np.ndarray:
    """(pairs,) float64 logits in the order of ``examples.t_labels``."""
    import torch

    device = torch.device(device or "cpu")
    net = net.to(device).eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(examples), batch):
            rows = np.arange(start, min(start + batch, len(examples)))
            b = to_tensors(examples.batch(rows, max_history), device)
            _, logits = net(b["items"], b["clicks"], b["gaps"], b["mask"], b["targets"])
            out.append(logits[b["tmask"]].double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _pair_users(examples: Examples) -> np.ndarray:
    return np.repeat(examples.user, np.diff(examples.t_offsets))


def evaluate_baseline(train: Examples, held: Examples, seed: int) -> dict:
    """Train the ID-only baseline on ``train``'s pairs and score ``held``'s."""
    from solaris_lib.model.baseline import predict_baseline, train_baseline

    model = train_baseline(_pair_users(train), train.t_items, train.t_labels, seed=seed)
    return metrics.summary(held.t_labels, predict_baseline(model, _pair_users(held), held.t_items))


def split(examples: Examples, holdout_start) -> tuple[Examples, Examples]:
    cut = int(holdout_start.timestamp() * 1_000_000)
    train, held = examples.select(examples.ts_us < cut), examples.select(examples.ts_us >= cut)
    if not len(train) or not held.pairs:
        raise EmptyInputError(f"need labelled requests before and after {holdout_start}: got "
                              f"{len(train)} training and {len(held)} held-out requests")
    return train, held


def compare_with_serving(model_root: str, held: Examples, new_loss: float) -> tuple[bool, str, dict]:
    """(promote?, decision text, serving model's held-out metrics) on the same held-out window."""
    from solaris_lib.model.network import FoundationNet

    serving = artefact.serving_version(model_root)
    if serving is None:
        return True, "promoted: no model was serving", {}
    cfg, state = artefact.load_state(artefact.version_dir(model_root, serving))
    net = FoundationNet(cfg)
    net.load_state_dict(state)
    old = metrics.summary(held.t_labels, predict(net, held, cfg.max_history))
    if new_loss <= old["log_loss"]:
        return True, (f"promoted: held-out log-loss {new_loss:.5f} <= serving {serving} "
                      f"{old['log_loss']:.5f}"), old
    return False, (f"kept serving {serving}: held-out log-loss {new_loss:.5f} is worse than its "
                   f"{old['log_loss']:.5f}"), old


def run_training(settings: SolarisSettings, request: TrainRequest) -> TrainReport:
    """Train, evaluate, write the version and promote it if it is not worse than the served one."""
    import torch

    torch.set_num_threads(request.threads)
    layout = DataLayout.from_settings(settings)
    model_root = layout.model(MODEL_NAME)
    cfg = request.config()
    train, held = split(load_examples(layout.logs, request.interval), request.holdout_start)
    started = time.perf_counter()
    net = (fit_distributed(cfg, train, request.processes) if request.processes > 1
           else fit(cfg, train))
    train_s = time.perf_counter() - started
    fm = metrics.summary(held.t_labels, predict(net, held, cfg.max_history))
    base = evaluate_baseline(train, held, cfg.seed)
    log.info("held-out: FM log-loss %.5f AUC %.4f | ID-only log-loss %.5f AUC %.4f",
             fm["log_loss"], fm["roc_auc"], base["log_loss"], base["roc_auc"])
    state = net.state_dict()
    version = f"{request.interval.key}-{artefact.weights_digest(state, cfg)}"
    promote, decision, old = compare_with_serving(model_root, held, fm["log_loss"])
    result = {"foundation": fm, "id_only": base, "train_requests": len(train),
              "train_pairs": train.pairs, "train_seconds": round(train_s, 3),
              "preset": request.preset, "processes": request.processes,
              "serving_at_training": {"version": artefact.serving_version(model_root), **old}}
    window = {"start": request.interval.start.isoformat(), "end": request.interval.end.isoformat(),
              "holdout_start": request.holdout_start.isoformat()}
    folder = artefact.write_version(model_root, version, state, cfg, result, window)
    if promote:
        artefact.set_serving(model_root, version)
    log.info("wrote model %s to %s; %s", version, folder, decision)
    return TrainReport(version, folder, promote, artefact.serving_version(model_root), decision,
                       result)
