"""``solaris train-foundation``, ``solaris infer-embeddings``, ``solaris model-versions``.

The spark-submit jobs (``jobs/train_foundation.py``, ``jobs/infer_embeddings.py``) share the
argument definitions and request builders below.
"""

from __future__ import annotations

import argparse
import json

from solaris_lib.intervals import Interval, parse_duration


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--start", required=True, help="window start (ISO-8601, UTC)")
    parser.add_argument("--end", required=True, help="window end, exclusive (ISO-8601, UTC)")
    parser.add_argument("--holdout", default="1d", help="held-out tail of the window (default 1d)")
    parser.add_argument("--preset", default=None,
                        help="test, small, default or large (default: SOLARIS_FOUNDATION_PRESET)")
    parser.add_argument("--model", default=None, choices=("foundation", "two_tower"),
                        help="which shipped model to train (default: SOLARIS_FOUNDATION_MODEL)")
    parser.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    parser.add_argument("--processes", type=int, default=1,
                        help="DDP processes via Spark's TorchDistributor (default 1: no Spark)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--seed", type=int, default=0)


def train_request(args):
    from solaris_lib.config import load_settings
    from solaris_lib.model.train import TrainRequest

    settings = load_settings()
    return TrainRequest(Interval.parse(args.start, args.end), parse_duration(args.holdout),
                        args.preset or settings.foundation_preset, args.epochs, args.processes,
                        args.seed, args.threads, args.model or settings.foundation_model)


def add_infer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--start", required=True, help="interval start (ISO-8601, UTC)")
    parser.add_argument("--end", required=True, help="interval end, exclusive (ISO-8601, UTC)")
    parser.add_argument("--model-version", default=None, help="default: the serving version")
    parser.add_argument("--batch-users", type=int, default=256, help="users per forward pass")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per Python worker")


def infer_request(args):
    from solaris_lib.model.inference import InferRequest

    return InferRequest(Interval.parse(args.start, args.end), args.model_version,
                        args.batch_users, args.threads)


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train-foundation", help="train, evaluate, version and maybe promote the foundation model",
        description="Trains on [start, end - holdout), evaluates log-loss and AUC (and an ID-only "
        "baseline) on the held-out tail, writes a version under the model root and promotes it "
        "when its held-out log-loss is not worse than the serving version's.")
    add_train_arguments(train)
    train.set_defaults(handler=_train)
    infer = subparsers.add_parser(
        "infer-embeddings", help="embed an interval's speculated pairs (Spark, local master)",
        description="Reads speculated/ and mined/user_history/ of the interval and writes "
        "embeddings/interval=KEY (user_id, item_id, model_version, embedding fp16).")
    add_infer_arguments(infer)
    infer.add_argument("--master", default=None, help="Spark master (default SOLARIS_SPARK_MASTER)")
    infer.set_defaults(handler=_infer)
    versions = subparsers.add_parser("model-versions", help="list foundation model versions")
    versions.add_argument("--json", action="store_true", help="one JSON object")
    versions.set_defaults(handler=_versions)


def _train(args) -> int:
    from solaris_lib.config import load_settings
    from solaris_lib.model.train import run_training

    report = run_training(load_settings(), train_request(args))
    print(json.dumps(report.as_dict()))
    return 0


def _infer(args) -> int:
    from solaris_lib.config import load_settings
    from solaris_lib.model.fallback import embed_interval
    from solaris_lib.runs import recorded_run
    from solaris_lib.sparkutil import spark_session

    settings = load_settings()
    request = infer_request(args)

    def run() -> dict:
        with spark_session("solaris-infer-embeddings",
                           master=args.master or settings.spark_master) as spark:
            return embed_interval(spark, settings, request)

    print(recorded_run(settings, "infer-embeddings", request.interval, run))
    return 0


def _versions(args) -> int:
    from solaris_lib.config import load_settings
    from solaris_lib.layout import DataLayout
    from solaris_lib.model.artefact import list_versions, serving_version
    from solaris_lib.model.train import MODEL_NAME

    root = DataLayout.from_settings(load_settings()).model(MODEL_NAME)
    versions, serving = list_versions(root), serving_version(root)
    if args.json:
        print(json.dumps({"root": root, "serving": serving, "versions": [
            {"version": v.version, "metrics": v.metrics, "window": v.window} for v in versions]}))
        return 0
    print(f"{'version':<30} {'serving':<8} {'FM logloss':>10} {'FM AUC':>7} {'ID logloss':>10} "
          f"{'ID AUC':>7}  window")
    for v in versions:
        fm, base = v.metrics.get("foundation", {}), v.metrics.get("id_only", {})
        print(f"{v.version:<30} {'*' if v.version == serving else '':<8} "
              f"{fm.get('log_loss', float('nan')):>10.5f} {fm.get('roc_auc', float('nan')):>7.4f} "
              f"{base.get('log_loss', float('nan')):>10.5f} {base.get('roc_auc', float('nan')):>7.4f}"
              f"  {v.window.get('start')} .. {v.window.get('end')}")
    if not versions:
        print(f"(no versions under {root})")
    return 0
