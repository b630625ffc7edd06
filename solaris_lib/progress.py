"""Progress of long commands: stages and counts with an ETA, as a tqdm bar on a terminal and as
plain log lines in logs (a bar's carriage returns would garble a log file).

A command opens a :class:`Progress` with its planned stages (a count, or the names); the code
it calls marks stages with :func:`step` and loops with :func:`track`, which report to the
progress the command opened and do nothing otherwise (in Spark jobs, tests, library use), so
library functions need no progress argument::

    with Progress("speculation-eval", total=7):
        with step("mine") as done:
            rows = mine(...)
            done.count(rows, "rows")
        for day in track(days, "simulate", unit="day"):
            ...

The ETA is the mean time of the stages done so far times the stages left: honest when stages
are alike (days, intervals, epochs), a rough guide otherwise.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
_CURRENT: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("progress", default=None)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class StepResult:
    """What a finished step reports beside its time: counts (``done.count(n, "rows")``)."""

    def __init__(self) -> None:
        self.counts: list[str] = []

    def count(self, amount: int | float, unit: str) -> None:
        self.counts.append(f"{amount:,} {unit}" if isinstance(amount, int) else
                           f"{amount:,.3g} {unit}")


class Progress:
    """The stages of one command. ``total``: stages planned (None: unknown, no ETA);
    ``bar``: a tqdm bar (default: when stderr is a terminal), else log lines."""

    def __init__(self, name: str, total: int | None = None, *, bar: bool | None = None,
                 clock=time.monotonic) -> None:
        self.name = name
        self.total = total
        self.done = 0
        self._clock = clock
        self._started = clock()
        self._bar = None
        if bar if bar is not None else sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=name, unit="stage", file=sys.stderr, leave=True)
        self._token: contextvars.Token | None = None

    def eta_s(self) -> float | None:
        """Seconds left: mean stage time so far x stages left (None before one or unplanned)."""
        if not self.done or self.total is None:
            return None
        return (self._clock() - self._started) / self.done * max(0, self.total - self.done)

    def finished(self, stage: str, seconds: float, result: StepResult) -> str:
        """Count one stage done; returns (and logs, or writes above the bar) its line."""
        self.done += 1
        if self.total is not None and self.done > self.total:
            self.total = self.done  # more stages than planned: the plan grows, no negative ETA
        eta = self.eta_s()
        of = f"/{self.total}" if self.total is not None else ""
        counts = f" ({', '.join(result.counts)})" if result.counts else ""
        line = (f"{self.name} [{self.done}{of}] {stage} done in {_duration(seconds)}{counts}; "
                f"elapsed {_duration(self._clock() - self._started)}"
                + (f", ETA {_duration(eta)}" if eta is not None else ""))
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.set_postfix_str(stage, refresh=False)
            self._bar.update(1)
            self._bar.write(line, file=sys.stderr)
        else:
            log.info("%s", line)
        return line

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    def __enter__(self) -> Progress:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def current() -> Progress | None:
    """The progress the running command opened, if any."""
    return _CURRENT.get()


@contextmanager
def step(stage: str) -> Iterator[StepResult]:
    """One stage of the current command (a no-op without one); yields its :class:`StepResult`
    for counts. A stage that raises is not counted."""
    result = StepResult()
    progress = _CURRENT.get()
    started = time.monotonic()
    yield result
    if progress is not None:
        progress.finished(stage, time.monotonic() - started, result)


def track(items: Iterable[T], stage: str, unit: str = "item") -> Iterator[T]:
    """``items``, one stage each (``<stage> <unit> k``), in the current command's progress."""
    for index, item in enumerate(items):
        with step(f"{stage} {unit} {index + 1}"):
            yield item
