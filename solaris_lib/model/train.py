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
from solaris_lib.evaluation import metrics
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout
from solaris_lib.model import artefact
from solaris_lib.model.config import FoundationConfig
from solaris_lib.model.contract import SHIPPED_FACTORIES
from solaris_lib.model.examples import Examples, build_examples

log = logging.getLogger(__name__)
MODEL_NAME = "foundation"  # the model root's folder name, whichever model is trained
MODELS = ("foundation", "two_tower")  # shipped models; each config names its factory
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
    model: str = "foundation"  # which shipped model: foundation or two_tower

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; known: {', '.join(MODELS)}")
        if self.model != "foundation" and self.processes > 1:
            raise ConfigError(f"--processes > 1 trains the foundation model only, not {self.model}")
        if not timedelta(0) < self.holdout < self.interval.length:
            raise ConfigError(f"holdout {self.holdout} must be positive and shorter than the "
                              f"window {self.interval}")
        if self.processes < 1 or self.threads < 1:
            raise ConfigError(f"--processes and --threads must be >= 1, got {self.processes} "
                              f"and {self.threads}")

    @property
    def holdout_start(self):
        return self.interval.end - self.holdout

    def config(self):
        """The model's config (:class:`FoundationConfig` or ``TwoTowerConfig``) of the preset."""
        overrides = {"seed": self.seed}
        if self.epochs is not None:
            overrides["epochs"] = self.epochs
        return model_config(self.model, self.preset, **overrides)


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


def _forward(net, b: dict):
    return net(b["items"], b["clicks"], b["gaps"], b["mask"], b["targets"])


def validation_split(train: Examples, share: float) -> tuple[Examples, Examples | None]:
    """(fit, validation): the newest ``share`` of the requests (by time) validate."""
    if share <= 0 or len(train) < 2:
        return train, None
    cut = np.quantile(train.ts_us, 1 - share, method="higher")
    fit_part, val = train.select(train.ts_us < cut), train.select(train.ts_us >= cut)
    return (fit_part, val) if len(fit_part) and val.pairs else (train, None)


def _schedule(cfg: FoundationConfig, steps: int):
    """lr multiplier at step s: linear warm-up over ``warmup_share`` of the steps, then cosine
    decay to 5 % of the peak at the last step."""
    warm = max(1, int(cfg.warmup_share * steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        done = min(1.0, (step - warm) / max(1, steps - warm))
        return 0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * done))

    return factor


def _optimizer(net, cfg: FoundationConfig):
    """AdamW over the trainable parameters: matrices and tables decay by ``weight_decay`` (a
    hashed table's unused rows drift to zero), vectors (biases, norms) do not."""
    import torch

    trainable = [p for p in net.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    rest = [p for p in trainable if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr)


@dataclass
class EpochStats:
    epoch: int
    train_loss: float
    validation_loss: float | None
    lr: float
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _epoch(net, opt, sched, cfg: FoundationConfig, train: Examples, rng, rank: int, world: int,
           device) -> float:
    """One pass over ``train``, oldest requests first when ``cfg.time_ordered`` (else
    shuffled); rank ``r`` of ``world`` takes every world-th batch, the same count on every
    rank, as DDP needs. Returns the mean training loss per request."""
    import torch

    order = (np.argsort(train.ts_us, kind="stable") if cfg.time_ordered
             else rng.permutation(len(train)))
    batches = [order[i:i + cfg.batch_requests] for i in range(0, len(order), cfg.batch_requests)]
    mine = batches[rank::world][: len(batches) // world] if len(batches) >= world else batches[:1]
    net.train()
    started, last, seen, total = time.perf_counter(), time.perf_counter(), 0, 0.0
    for rows in mine:
        b = to_tensors(train.batch(rows, cfg.max_history, cfg.max_clicks), device)
        _, logits = _forward(net, b)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits[b["tmask"]], b["labels"][b["tmask"]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        seen, total = seen + len(rows), total + loss.item() * len(rows)
        if time.perf_counter() - last > LOG_EVERY_S:
            last = time.perf_counter()
            log.info("%d/%d requests, %.0f requests/s, loss %.4f", seen, len(train) // world,
                     seen / (last - started), total / seen)
    return total / max(seen, 1)


class EarlyStopping:
    """Keeps the weights of the epoch with the lowest validation loss; ``step`` says stop once
    ``patience`` epochs in a row did not improve on it (without a validation loss: never stop,
    keep the last weights)."""

    def __init__(self, patience: int) -> None:
        self.patience, self.best, self.best_epoch, self.state, self.waited = patience, np.inf, 0, None, 0

    def step(self, epoch: int, validation_loss: float | None, module) -> bool:
        """Record one epoch; True when training should stop."""
        import copy

        if validation_loss is None or validation_loss < self.best:
            self.best = self.best if validation_loss is None else validation_loss
            self.best_epoch, self.waited = epoch, 0
            self.state = copy.deepcopy(module.state_dict())
            return False
        self.waited += 1
        return self.waited >= self.patience

    def restore(self, module) -> None:
        if self.state is not None:
            module.load_state_dict(self.state)


def train_loop(net, cfg: FoundationConfig, train: Examples, *, rank: int = 0, world: int = 1,
               device="cpu") -> list[EpochStats]:
    """Up to ``cfg.epochs`` epochs of AdamW with the warm-up/cosine schedule, scored on the
    newest ``validation_share`` of ``train`` after each; stops after ``patience`` epochs
    without improvement and leaves ``net`` at its best epoch. Returns the learning curve."""
    import torch

    fit_part, val = validation_split(train, cfg.validation_share)
    steps = cfg.epochs * max(1, -(-len(fit_part) // cfg.batch_requests) // world)
    opt = _optimizer(net, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg, steps))
    rng = np.random.default_rng(cfg.seed)
    module = getattr(net, "module", net)
    curve, stopping = [], EarlyStopping(cfg.patience)
    for epoch in range(1, cfg.epochs + 1):
        started = time.perf_counter()
        lr = opt.param_groups[0]["lr"]
        train_loss = _epoch(net, opt, sched, cfg, fit_part, rng, rank, world, device)
        val_loss = (metrics.log_loss_from_logits(val.t_labels, predict(module, val, device=device))
                    if val is not None else None)
        curve.append(EpochStats(epoch, train_loss, val_loss, lr, time.perf_counter() - started))
        log.info("epoch %d/%d (rank %d/%d): train loss %.5f, validation log-loss %s, %.1f s",
                 epoch, cfg.epochs, rank, world, train_loss,
                 "-" if val_loss is None else f"{val_loss:.5f}", curve[-1].seconds)
        if stopping.step(epoch, val_loss, module):
            log.info("stopped after epoch %d: the best validation loss was epoch %d's", epoch,
                     stopping.best_epoch)
            break
    stopping.restore(module)
    return curve


def best_epoch(curve: list[EpochStats]) -> int:
    """The epoch whose weights training kept (the lowest validation loss, else the last)."""
    scored = [c for c in curve if c.validation_loss is not None]
    return min(scored, key=lambda c: c.validation_loss).epoch if scored else curve[-1].epoch


def network_of(cfg):
    """A freshly initialised network of a shipped model's config, built by the artefact
    factory its config names (``cfg.factory``): the path a saved version is loaded by."""
    return artefact.resolve_factory(cfg.factory, SHIPPED_FACTORIES)(cfg.to_dict())


def new_network(cfg, train: Examples):
    """A seeded :func:`network_of` ``cfg`` whose output bias starts at ``train``'s click
    rate."""
    import torch

    torch.manual_seed(cfg.seed)
    net = network_of(cfg)
    net.set_base_rate(float(train.t_labels.mean()) if train.pairs else 0.5)
    return net


def fit(cfg, train: Examples, device=None):
    """(trained network of ``cfg``'s model on CPU in eval mode, learning curve): single
    process, seeded (deterministic on CPU)."""
    import torch

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    net = new_network(cfg, train)
    curve = train_loop(net.to(device), cfg, train, device=device)
    return net.eval().cpu(), curve


def model_config(model: str, preset: str, **overrides):
    """The config of shipped ``model`` (one of :data:`MODELS`) at ``preset``."""
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    if model == "two_tower":
        from solaris_lib.model.two_tower import TwoTowerConfig

        return TwoTowerConfig.preset(preset, **overrides)
    return FoundationConfig.preset(preset, **overrides)


def _distributed_worker(cfg, train: Examples, use_gpu: bool) -> dict:
    """Runs in each process started by TorchDistributor (torchrun env): DDP over NCCL on the
    process's GPU (``LOCAL_RANK``), or over gloo on CPU."""
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("nccl" if use_gpu else "gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_gpu
                              else "cpu")
        net = new_network(cfg, train).to(device)
        net = DistributedDataParallel(net, device_ids=[device.index] if use_gpu else None)
        curve = train_loop(net, cfg, train, rank=rank, world=world, device=device)
        return {"state": {k: v.detach().cpu().numpy()
                          for k, v in net.module.state_dict().items()},
                "curve": [c.as_dict() for c in curve]}
    finally:
        dist.destroy_process_group()


def fit_distributed(cfg, train: Examples, processes: int,
                    use_gpu: bool | None = None):
    """Train with ``processes`` DDP workers started by Spark's TorchDistributor, one GPU each
    when ``use_gpu`` (default: when this machine's torch sees CUDA), else on CPU over gloo."""
    import torch
    from pyspark.ml.torch.distributor import TorchDistributor

    from solaris_lib.sparkutil import get_spark

    use_gpu = torch.cuda.is_available() if use_gpu is None else use_gpu
    get_spark("solaris-train-foundation")  # the distributor needs an active session
    out = TorchDistributor(num_processes=processes, local_mode=True, use_gpu=use_gpu).run(
        _distributed_worker, cfg, train, use_gpu)
    net = network_of(cfg)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in out["state"].items()})
    return net.eval(), [EpochStats(**c) for c in out["curve"]]


def predict(net, examples: Examples, batch: int = 512, device=None,
            embeddings: bool = False):
    """Score ``examples`` with any :class:`~solaris_lib.model.contract.InteractionModel` that has
    a logit: (pairs,) float64 logits in the order of ``examples.t_labels``; with ``embeddings``,
    (logits, (pairs, D) float32 interaction embeddings)."""
    import torch

    device = torch.device(device or "cpu")
    was_training = net.training
    net = net.to(device).eval()
    logits_out, emb_out = [], []
    with torch.inference_mode():
        for start in range(0, len(examples), batch):
            rows = np.arange(start, min(start + batch, len(examples)))
            b = to_tensors(examples.batch(rows, net.max_history, net.max_clicks), device)
            emb, logits = net.embed(net.encode(b["items"], b["clicks"], b["gaps"], b["mask"]),
                                    b["targets"])
            if logits is None:
                raise ConfigError(f"{type(net).__name__} has no logit: it cannot be scored")
            logits_out.append(logits[b["tmask"]].double().cpu().numpy())
            if embeddings:
                emb_out.append(emb[b["tmask"]].float().cpu().numpy())
    net.train(was_training)
    logits = np.concatenate(logits_out) if logits_out else np.zeros(0)
    if not embeddings:
        return logits
    return logits, (np.concatenate(emb_out) if emb_out else np.zeros((0, net.dim), np.float32))


def _pair_users(examples: Examples) -> np.ndarray:
    return np.repeat(examples.user, np.diff(examples.t_offsets))


def evaluate_baseline_logits(train: Examples, held: Examples, seed: int) -> np.ndarray:
    """(held pairs,) logits of the ID-only baseline trained on ``train``'s pairs."""
    from solaris_lib.model.baseline import predict_baseline, train_baseline

    model = train_baseline(_pair_users(train), train.t_items, train.t_labels, seed=seed)
    return predict_baseline(model, _pair_users(held), held.t_items)


def evaluate_baseline(train: Examples, held: Examples, seed: int) -> dict:
    """Train the ID-only baseline on ``train``'s pairs and score ``held``'s."""
    return metrics.summary(held.t_labels, evaluate_baseline_logits(train, held, seed))


def split(examples: Examples, holdout_start) -> tuple[Examples, Examples]:
    cut = int(holdout_start.timestamp() * 1_000_000)
    train, held = examples.select(examples.ts_us < cut), examples.select(examples.ts_us >= cut)
    if not len(train) or not held.pairs:
        raise EmptyInputError(f"need labelled requests before and after {holdout_start}: got "
                              f"{len(train)} training and {len(held)} held-out requests")
    return train, held


def compare_with_serving(model_root: str, held: Examples, new_loss: float,
                         factories=SHIPPED_FACTORIES) -> tuple[bool, str, dict]:
    """(promote?, decision text, serving model's held-out metrics) on the same held-out window;
    the serving model loads through its manifest's factory (any allowed model)."""
    serving = artefact.serving_version(model_root)
    if serving is None:
        return True, "promoted: no model was serving", {}
    net = artefact.load_model(artefact.version_dir(model_root, serving), serving,
                              factories=factories)
    old = metrics.summary(held.t_labels, predict(net, held))
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
    if request.processes > 1:
        net, curve = fit_distributed(cfg, train, request.processes)
    else:
        net, curve = fit(cfg, train)
    train_s = time.perf_counter() - started
    fm = metrics.summary(held.t_labels, predict(net, held))
    base = evaluate_baseline(train, held, cfg.seed)
    log.info("held-out: %s log-loss %.5f AUC %.4f | ID-only log-loss %.5f AUC %.4f",
             request.model, fm["log_loss"], fm["roc_auc"], base["log_loss"], base["roc_auc"])
    state = net.state_dict()
    version = f"{request.interval.key}-{artefact.weights_digest(state, cfg)}"
    promote, decision, old = compare_with_serving(model_root, held, fm["log_loss"],
                                                  settings.allowed_model_factories)
    result = {"foundation": fm, "id_only": base, "train_requests": len(train),
              "train_pairs": train.pairs, "train_seconds": round(train_s, 3),
              "best_epoch": best_epoch(curve), "learning_curve": [c.as_dict() for c in curve],
              "model": request.model, "preset": request.preset, "processes": request.processes,
              "serving_at_training": {"version": artefact.serving_version(model_root), **old}}
    window = {"start": request.interval.start.isoformat(), "end": request.interval.end.isoformat(),
              "holdout_start": request.holdout_start.isoformat()}
    folder = artefact.write_version(model_root, version, state, cfg, result, window,
                                    factory=cfg.factory)
    if promote:
        artefact.set_serving(model_root, version)
    log.info("wrote model %s to %s; %s", version, folder, decision)
    return TrainReport(version, folder, promote, artefact.serving_version(model_root), decision,
                       result)
