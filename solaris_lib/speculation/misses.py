"""Read the online client's sampled misses (Redis stream ``<prefix>:misses``) for one interval.

Entries (docs/pipeline.md): fields ``user`` (decimal id), ``items`` (comma-separated decimal ids,
at most :data:`MAX_ITEMS` of them) and ``ts`` (epoch ms). The run for ``[s, e)`` reads entries
whose ``ts`` lies in ``[s, e)`` (ids up to an hour past ``e``, for late writes), so a rerun reads
the same entries while they are retained. The URL is any form of
``solaris_lib.cache.endpoint`` (``redis+cluster://h1:7000,h2:7001`` included); a malformed one
is a :class:`CacheConfigError`.

Any ranker may XADD to the stream, so nothing in it can fail a run: every entry is checked and
one that is undecodable (not ASCII), oversized (a field over :data:`MAX_FIELD_BYTES`, more than
:data:`MAX_ITEMS` items) or mistyped (a missing field, a value that is not a non-negative
decimal int64) is skipped and counted by reason; at most :data:`MAX_ENTRIES` entries and
:data:`MAX_PAIRS` distinct pairs are read per run (the pairs go through the driver); a key
that is not a stream skips the source. When Redis does not answer the source is
skipped too (logged). A Redis user that may not read the stream (``NOPERM``) or whose
credentials are refused fails the run loudly (:class:`MissesAccessError`): a silent skip would
hide a misconfiguration for good.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field

import redis

from solaris_lib.cache.connection import connect, translated
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import CacheError, CacheUnavailableError
from solaris_lib.cache.format import MISS_MAX_ITEMS, misses_key
from solaris_lib.errors import ConfigError
from solaris_lib.intervals import Interval

log = logging.getLogger(__name__)

_BATCH = 10_000
_LATE_MS = 3_600_000
MAX_ENTRIES = 1_000_000  # entries read per run, at most
MAX_PAIRS = 2_000_000  # distinct missed pairs read per run, at most (Python tuples on the driver)
MAX_ITEMS = MISS_MAX_ITEMS  # items per entry (the client writes at most this many)
MAX_FIELD_BYTES = 24 * MAX_ITEMS  # bytes of one field's value
_INT64 = 2**63 - 1
_DECIMAL = re.compile(r"[0-9]{1,19}")


class MissesAccessError(ConfigError):
    """The speculate job's Redis user may not read the misses stream (exit 2)."""


@dataclass
class MissesRead:
    """What one read of the stream found: the distinct (user, item) rows of the interval, the
    entries read and those skipped per reason."""

    rows: list[tuple[int, int]] = field(default_factory=list)
    entries: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    truncated: bool = False

    def as_dict(self) -> dict:
        return {"pairs": len(self.rows), "entries": self.entries, "skipped": self.skipped,
                "truncated": self.truncated}


def _number(text: str) -> int:
    if not _DECIMAL.fullmatch(text) or int(text) > _INT64:
        raise ValueError(text)
    return int(text)


def check_entry(fields: object) -> tuple[list[tuple[int, int, int]], str | None]:
    """``(rows, reason)`` of one stream entry: its (user_id, item_id, ts_ms) rows, or no rows
    and why it is skipped (``undecodable``, ``oversized``, ``mistyped``)."""
    if not isinstance(fields, dict):
        return [], "mistyped"
    try:
        text = {(k.decode("ascii") if isinstance(k, bytes) else str(k)):
                (v.decode("ascii") if isinstance(v, bytes) else str(v))
                for k, v in fields.items()}
    except UnicodeDecodeError:
        return [], "undecodable"
    if any(len(value) > MAX_FIELD_BYTES for value in text.values()):
        return [], "oversized"
    parts = [part.strip() for part in text.get("items", "").split(",") if part.strip()]
    if len(parts) > MAX_ITEMS:
        return [], "oversized"
    try:
        user, ts = _number(text["user"]), _number(text["ts"])
        items = [_number(part) for part in parts]
    except (KeyError, ValueError):
        return [], "mistyped"
    return [(user, item, ts) for item in items], None


def parse_entry(fields: dict) -> list[tuple[int, int, int]]:
    """(user_id, item_id, ts_ms) rows of one stream entry; a skipped entry gives no rows."""
    return check_entry(fields)[0]


def read_stream(redis_url: str, prefix: str, interval: Interval) -> MissesRead | None:
    """The misses of ``interval`` with counts (see the module docstring); None when Redis does
    not answer or the key is not a stream (the source is skipped)."""
    endpoint = Endpoint.from_url(redis_url)
    key = misses_key(prefix)
    try:
        client = connect(endpoint, timeout_s=5.0)
        try:
            with translated(f"reading {key} from {endpoint.redacted()}"):
                found = _read(client, key, interval)
        finally:
            client.close()
    except CacheError as exc:
        cause = exc.__cause__
        if isinstance(cause, redis.exceptions.NoPermissionError | redis.AuthenticationError):
            raise MissesAccessError(
                f"Redis user {endpoint.username or 'default'!r} at {endpoint.redacted()} may "
                f"not read {key}: {exc}. Grant it +xrange on ~{key} (docs/operations.md, "
                f"'Auth failures'), or run speculate with --no-misses.") from exc
        if "WRONGTYPE" in str(exc):
            log.warning("%s is not a stream: the miss source is skipped (%s)", key, exc)
            return None
        level = logging.WARNING if isinstance(exc, CacheUnavailableError) else logging.ERROR
        log.log(level, "misses stream not read (%s): the miss source is skipped", exc)
        return None
    if found.skipped or found.truncated:
        log.warning("%s: %d entries read, skipped %s%s", key, found.entries, found.skipped,
                    f"; only the first {found.entries} entries read (at most {MAX_ENTRIES} "
                    f"entries and {MAX_PAIRS} pairs)" if found.truncated else "")
    log.info("read %d distinct missed pairs of %s from %s", len(found.rows), interval, key)
    return found


def _read(client, key: str, interval: Interval) -> MissesRead:
    start_ms = int(interval.start.timestamp() * 1000)
    end_ms = int(interval.end.timestamp() * 1000)
    rows: set[tuple[int, int]] = set()
    skipped: Counter[str] = Counter()
    read, cursor = MissesRead(), f"{start_ms}-0"
    while read.entries < MAX_ENTRIES:
        count = min(_BATCH, MAX_ENTRIES - read.entries)
        batch = client.xrange(key, min=cursor, max=f"{end_ms + _LATE_MS}", count=count)
        for _entry_id, fields in batch:
            read.entries += 1
            found, reason = check_entry(fields)
            if reason:
                skipped[reason] += 1
            rows.update((u, i) for u, i, ts in found if start_ms <= ts < end_ms)
            if len(rows) >= MAX_PAIRS:  # a flood of distinct misses: the driver holds them
                read.truncated = True
                break
        if read.truncated or len(batch) < count:
            break
        cursor = f"({batch[-1][0].decode()}"
    else:
        read.truncated = True
    read.rows, read.skipped = sorted(rows), dict(skipped)
    return read


def against_earlier_read(again: MissesRead, earlier: dict | None) -> dict:
    """``again.as_dict()`` (an interval's misses read a second time, by the next run) with
    ``pairs_then``: the pairs the interval's own run read (``earlier``: that run's report's
    ``misses``; None when it read none), and ``lost_pairs``: how many fewer pairs the second read
    found. Nothing removes an entry from a read's id range but trimming (the client's
    ``MAXLEN ~``) or a deletion, and late writes only add, so a positive count is a lower bound
    of the pairs lost since (logged as a warning). None when either read was truncated or there
    is no earlier read."""
    found = again.as_dict()
    then = earlier.get("pairs") if isinstance(earlier, dict) else None
    found["pairs_then"] = then if isinstance(then, int) else None
    comparable = found["pairs_then"] is not None and not again.truncated and not earlier.get(
        "truncated")
    found["lost_pairs"] = max(0, found["pairs_then"] - len(again.rows)) if comparable else None
    if found["lost_pairs"]:
        log.warning("the misses stream lost at least %d of the %d pairs the previous interval's "
                    "run read (trimmed or deleted since): the scorer trains on fewer misses than "
                    "that run proposed; the stream should hold two intervals plus a run's delay "
                    "(the client's miss_stream_maxlen)", found["lost_pairs"], found["pairs_then"])
    return found


def read_misses(redis_url: str, prefix: str, interval: Interval) -> list[tuple[int, int]] | None:
    """Sorted distinct (user_id, item_id) misses of ``interval``; None when the source is
    skipped (:func:`read_stream`)."""
    found = read_stream(redis_url, prefix, interval)
    return None if found is None else found.rows


def misses_frame(spark, rows: list[tuple[int, int]] | None):
    """The misses as a (user_id, item_id) DataFrame; None when there are none (the source then
    adds no Spark work: no candidates either way)."""
    if not rows:
        return None
    return spark.createDataFrame(rows, "user_id long, item_id long")
