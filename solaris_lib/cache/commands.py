"""``solaris publish-cache`` and ``solaris cache-info`` (``cache-lookup`` is the client's:
:mod:`solaris_lib.client.commands`).

``publish-cache`` runs the same code as ``jobs/publish_cache.py`` (spark-submit) in a local
Spark session; ``cache-info`` shows what is served and how much memory each master has. Output
goes to stdout (JSON with ``--json``), progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from solaris_lib.errors import ConfigError, validation_problems
from solaris_lib.intervals import Interval, parse_duration


def add_publish_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``solaris publish-cache`` and ``jobs/publish_cache.py``."""
    parser.add_argument("--start", required=True, help="data interval start (ISO-8601, UTC)")
    parser.add_argument("--end", required=True, help="data interval end (ISO-8601, UTC)")
    parser.add_argument("--ttl", default=None, help="lifetime of the version's keys, e.g. 3h "
                        "(default: three interval lengths)")
    parser.add_argument("--buckets", type=int, default=None,
                        help="hashes per user for its exact items, a power of two (default 4)")
    parser.add_argument("--partitions", type=int, default=None, help="parallel writers")
    parser.add_argument("--force", action="store_true",
                        help="switch the alias even when it names a later interval")


def publish_request(args: argparse.Namespace):
    """``(Interval, PublishConfig)`` from parsed arguments; bad values are a ConfigError."""
    from pydantic import ValidationError

    from solaris_lib.cache.publish import PublishConfig

    interval = Interval.parse(args.start, args.end)
    ttl = int(parse_duration(args.ttl).total_seconds()) if args.ttl else None
    given = {"ttl_s": ttl, "buckets": args.buckets, "partitions": args.partitions}
    try:
        config = PublishConfig(force=args.force,
                               **{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(f"invalid publish options: {validation_problems(exc)}") from exc
    return interval, config


def register(subparsers) -> None:
    pub = subparsers.add_parser(
        "publish-cache", help="publish an interval's embeddings to Redis and switch the alias",
        description="Reads embeddings/interval=KEY/ under the data root, writes a new cache "
        "version, verifies it and switches the alias atomically (see docs/cache-format.md).")
    add_publish_arguments(pub)
    pub.set_defaults(handler=_publish)

    info = subparsers.add_parser("cache-info", help="the served version and memory per master")
    info.add_argument("--json", action="store_true")
    info.set_defaults(handler=_info)


def _publish(args) -> int:
    from solaris_lib.cache.publish import publish
    from solaris_lib.config import load_settings
    from solaris_lib.runs import recorded_run
    from solaris_lib.sparkutil import get_spark

    settings = load_settings()
    interval, config = publish_request(args)

    def run():
        return publish(get_spark("solaris-publish-cache", master=settings.spark_master),
                       settings, interval, config)

    _write(recorded_run(settings, "publish-cache", interval, run))
    return 0


def _info(args) -> int:
    from solaris_lib.cache.server import CacheServer
    from solaris_lib.config import load_settings

    settings = load_settings()
    with CacheServer(settings.redis_url, settings.redis_key_prefix) as server:
        version = server.served_version()
        manifest = server.manifest(version) if version else None
        memory = server.memory()
        limits = server.hash_limits()
    summary = {
        "served_version": version,
        "manifest": manifest.to_fields() if manifest else None,
        "hash_limits": {"max_entries": limits.max_entries, "max_value": limits.max_value,
                        "source": limits.source},
        "masters": {name: {k: m.get(k) for k in ("used_memory", "maxmemory")}
                    for name, m in memory.items()},
    }
    _write(summary if args.json else _lines(summary))
    return 0


def _lines(summary: dict) -> str:
    return "\n".join(f"{key}: {value}" for key, value in summary.items())


def _write(payload: object) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
    sys.stdout.write(text + "\n")
