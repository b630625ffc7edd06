"""Stages, counts and the ETA of long commands; silent without a command's progress."""

import logging

from solaris_lib.progress import Progress, current, step, track


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_log_lines_carry_stage_counts_and_an_eta(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="solaris_lib.progress")
    with Progress("eval", total=4, bar=False, clock=clock) as progress:
        assert current() is progress
        with step("mine") as done:
            clock.now += 30
            done.count(1234, "rows")
        assert progress.eta_s() == 90.0  # 30 s per stage so far, 3 stages left
        for _ in track(["d1", "d2"], "simulate", unit="day"):
            clock.now += 10
    assert current() is None
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("eval [1/4] mine done in") and "(1,234 rows)" in lines[0]
    assert lines[0].endswith("elapsed 30s, ETA 1m30s")
    assert lines[2].startswith("eval [3/4] simulate day 2 done") and lines[2].endswith("ETA 17s")


def test_more_stages_than_planned_grow_the_plan_and_nothing_reports_without_a_command(caplog):
    caplog.set_level(logging.INFO, logger="solaris_lib.progress")
    with step("alone"):
        pass
    assert caplog.records == []
    with Progress("x", total=1, bar=False) as progress:
        for _ in track(range(3), "loop"):
            pass
    assert progress.done == 3 and progress.total == 3 and progress.eta_s() == 0


def test_a_terminal_gets_a_bar_with_the_same_lines(capsys):
    with Progress("demo", total=2, bar=True):
        with step("simulate"):
            pass
    err = capsys.readouterr().err
    assert "demo [1/2] simulate done" in err and "1/2" in err
