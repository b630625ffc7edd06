"""Cache versions written straight from docs/cache-format.md (format 2), independently of the
publisher: for the client's tests against real Redis and against the in-memory transport."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15


def bucket(item: int, buckets: int) -> int:
    """The spec's bucket of an item id, with Python integers."""
    return 0 if buckets == 1 else (item * GOLDEN) % 2**64 >> (65 - buckets.bit_length())


def put_version(execute: Callable[..., object], prefix: str, version: str,
                data: dict[int, dict[int, list[float]]], dim: int, *, buckets: int = 4,
                model_version: str = "m1", state: str = "complete", alias: bool = True,
                clusters: dict[int, dict[int, list[float]]] | None = None,
                extra: dict[str, str] | None = None) -> None:
    """Write a version: its manifest, each user's bucket hashes (and cluster hash), fp16
    little-endian values, and the alias. ``execute(*command)`` runs one Redis command."""
    manifest = {"version": version, "model_version": model_version, "codec": "fp16",
                "dim": str(dim), "buckets": str(buckets),
                "interval_start": "2026-01-05T10:00:00+00:00",
                "interval_end": "2026-01-05T11:00:00+00:00", "pairs": "0",
                "users": str(len(data)), "digest": "0" * 32, "ttl_s": "600", "state": state,
                "format": "2", **(extra or {})}
    execute("HSET", f"{prefix}:m:{version}", *[p for kv in manifest.items() for p in kv])
    for user, items in data.items():
        for item, value in items.items():
            key = f"{prefix}:e:{version}:{{{user}}}:{bucket(item, buckets)}"
            execute("HSET", key, str(item), np.asarray(value, "<f2").tobytes())
    for user, values in (clusters or {}).items():
        for cluster, value in values.items():
            execute("HSET", f"{prefix}:e:{version}:{{{user}}}:c", str(cluster),
                    np.asarray(value, "<f2").tobytes())
    if alias:
        execute("SET", f"{prefix}:alias", version)
