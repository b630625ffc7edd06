"""``solaris cache-lookup``: one user's items through the online client (debugging).

Prints one JSON line: the served version, the error (None when the cache answered), each row's
``hit`` and :class:`~solaris_lib.fallback.Level` and the first values of each embedding. Exit
code 0, or 5 when the lookup did not reach the cache.
"""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    look = subparsers.add_parser("cache-lookup", help="look up one user's items (debugging)")
    look.add_argument("user", type=int)
    look.add_argument("items", type=int, nargs="+")
    look.set_defaults(handler=_lookup)


def _lookup(args) -> int:
    from solaris_lib.client import SolarisClient
    from solaris_lib.config import load_settings

    settings = load_settings()
    with SolarisClient.from_url(settings.redis_url, key_prefix=settings.redis_key_prefix,
                                timeout_ms=1000, miss_sample_rate=0.0) as client:
        result = client.lookup(args.user, args.items)
    sys.stdout.write(json.dumps({
        "version": result.version, "model_version": result.model_version,
        "error": result.error, "hit": result.hit.tolist(), "level": result.level.tolist(),
        "embeddings": [row[:4].round(4).tolist() + ["..."] for row in result.embeddings]}) + "\n")
    return 0 if result.error is None else 5
