"""Read the online client's sampled misses (Redis stream ``<prefix>:misses``) for one interval.

Entries (docs/pipeline.md): fields ``user`` (decimal id), ``items`` (comma-separated decimal ids)
and ``ts`` (epoch ms). The run for ``[s, e)`` reads entries whose ``ts`` lies in ``[s, e)`` (ids
up to an hour past ``e``, for late writes), so a rerun reads the same entries while they are
retained. When Redis does not answer the source is skipped with a log line. The URL is any
form of ``solaris_lib.cache.endpoint`` (``redis+cluster://h1:7000,h2:7001`` included); a
malformed one is a :class:`CacheConfigError`.
"""

from __future__ import annotations

import logging

from solaris_lib.cache.connection import connect, translated
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheError
from solaris_lib.cache.format import misses_key
from solaris_lib.intervals import Interval

log = logging.getLogger(__name__)

_BATCH = 10_000
_LATE_MS = 3_600_000


def parse_entry(fields: dict) -> list[tuple[int, int, int]]:
    """(user_id, item_id, ts_ms) rows of one stream entry; malformed entries give no rows."""
    text = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()}
    try:
        user, ts = int(text["user"]), int(text["ts"])
        items = [int(i) for i in text.get("items", "").split(",") if i.strip()]
    except (KeyError, ValueError):
        return []
    return [(user, item, ts) for item in items if user >= 0 and item >= 0]


def read_misses(redis_url: str, prefix: str, interval: Interval) -> list[tuple[int, int]] | None:
    """Sorted distinct (user_id, item_id) misses of ``interval``; None when Redis is unreachable."""
    endpoint = Endpoint.from_url(redis_url)
    start_ms = int(interval.start.timestamp() * 1000)
    end_ms = int(interval.end.timestamp() * 1000)
    key = misses_key(prefix)
    try:
        client = connect(endpoint, timeout_s=5.0)
        rows, cursor = set(), f"{start_ms}-0"
        with translated(f"reading {key} from {endpoint.redacted()}"):
            while True:
                batch = client.xrange(key, min=cursor, max=f"{end_ms + _LATE_MS}", count=_BATCH)
                for _entry_id, fields in batch:
                    rows.update((u, i) for u, i, ts in parse_entry(fields)
                                if start_ms <= ts < end_ms)
                if len(batch) < _BATCH:
                    break
                cursor = f"({batch[-1][0].decode()}"
            client.close()
    except CacheError as exc:
        log.info("misses stream not read (%s): the miss source is skipped", exc)
        return None
    log.info("read %d distinct missed pairs of %s from %s", len(rows), interval, misses_key(prefix))
    return sorted(rows)


def misses_frame(spark, rows: list[tuple[int, int]] | None):
    """The misses as a (user_id, item_id) DataFrame, or None."""
    if rows is None:
        return None
    return spark.createDataFrame(rows, "user_id long, item_id long")
