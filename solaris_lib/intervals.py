"""Data intervals: the key of every run.

A run reads exactly ``[start, end)`` and writes exactly the partition named by
:attr:`Interval.key`. Times are timezone-aware UTC; naive inputs are rejected so that no job
silently uses the machine's local time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from solaris_lib.errors import ConfigError

_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_KEY_FORMAT = "%Y%m%dT%H%M%SZ"


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO-8601 timestamp into an aware UTC datetime.

    ``2026-01-05``, ``2026-01-05T10:00``, ``2026-01-05T10:00:00+00:00`` and ``...Z`` are accepted;
    a timestamp without a zone is taken as UTC (Airflow passes ``ds``-style strings without one).
    """
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"not an ISO-8601 timestamp: {text!r}") from exc
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def parse_duration(text: str) -> timedelta:
    """Parse ``90s``, ``15m``, ``1h``, ``7d`` or ``2w`` into a timedelta."""
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise ConfigError(f"not a duration like '1h' or '7d': {text!r}")
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def format_duration(value: timedelta) -> str:
    """The inverse of :func:`parse_duration`: ``value`` in the largest unit that divides it
    (``timedelta(hours=72)`` -> ``"3d"``, ``timedelta(minutes=90)`` -> ``"90m"``)."""
    seconds = int(value.total_seconds())
    if seconds != value.total_seconds():
        raise ConfigError(f"{value} is not a whole number of seconds")
    unit = next(u for u in ("w", "d", "h", "m", "s") if seconds % _UNIT_SECONDS[u] == 0)
    return f"{seconds // _UNIT_SECONDS[unit]}{unit}"


def require_utc(value: datetime, name: str) -> datetime:
    """Return ``value`` in UTC, refusing naive datetimes."""
    if value.tzinfo is None:
        raise ConfigError(f"{name} must be timezone-aware (UTC), got naive {value.isoformat()}")
    return value.astimezone(UTC)


@dataclass(frozen=True)
class Interval:
    """A half-open UTC time window ``[start, end)``."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", require_utc(self.start, "interval start"))
        object.__setattr__(self, "end", require_utc(self.end, "interval end"))
        if self.end <= self.start:
            raise ConfigError(f"interval end {self.end} is not after its start {self.start}")

    @classmethod
    def parse(cls, start: str, end: str) -> Interval:
        """Build from two ISO-8601 strings (as Airflow templates them)."""
        return cls(parse_timestamp(start), parse_timestamp(end))

    @classmethod
    def from_record(cls, record) -> Interval:
        """The interval of a :meth:`record` read back from JSON; :class:`ConfigError` when
        ``record`` is not one."""
        try:
            return cls.parse(record["start"], record["end"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"not an interval record ({exc!r}): {record!r}"[:300]) from exc

    def record(self) -> dict[str, str]:
        """The interval as JSON fields (``start``, ``end``: ISO-8601), as the report folders
        and the speculated partitions record it (read back by :meth:`from_record`)."""
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}

    @classmethod
    def ending_at(cls, end: datetime, length: timedelta) -> Interval:
        """The window of ``length`` that ends at ``end``."""
        return cls(end - length, end)

    @property
    def key(self) -> str:
        """Partition value naming this interval, e.g. ``20260105T100000Z`` (its start)."""
        return self.start.strftime(_KEY_FORMAT)

    @property
    def length(self) -> timedelta:
        return self.end - self.start

    def shift(self, delta: timedelta) -> Interval:
        return Interval(self.start + delta, self.end + delta)

    def previous(self) -> Interval:
        """The interval of the same length just before this one."""
        return self.shift(-self.length)

    def following(self) -> Interval:
        """The interval of the same length just after this one."""
        return self.shift(self.length)

    def hours(self) -> Iterator[datetime]:
        """Every hour start that overlaps the window (the log partitions to read)."""
        hour = self.start.replace(minute=0, second=0, microsecond=0)
        while hour < self.end:
            yield hour
            hour += timedelta(hours=1)

    def contains(self, moment: datetime) -> bool:
        return self.start <= require_utc(moment, "moment") < self.end

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"


def key_to_start(key: str) -> datetime:
    """Inverse of :attr:`Interval.key`."""
    return datetime.strptime(key, _KEY_FORMAT).replace(tzinfo=UTC)
