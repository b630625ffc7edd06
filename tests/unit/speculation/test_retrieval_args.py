"""jobs/train_retrieval.py's ALS and choice-model flags: defaults from RetrievalConfig, bad
values named."""

import importlib.util
import logging
from pathlib import Path

import pytest

from solaris_lib.errors import ConfigError
from solaris_lib.speculation.config import RetrievalConfig, retrieval_config

_PATH = Path(__file__).resolve().parents[3] / "jobs" / "train_retrieval.py"
INTERVAL = ["--start", "2026-01-05", "--end", "2026-01-06"]


def _job():
    spec = importlib.util.spec_from_file_location("train_retrieval_job", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_the_given_flags_override_the_config():
    import argparse
    from datetime import timedelta

    from solaris_lib.speculation.jobargs import add_retrieval_arguments, retrieval_overrides

    parser = argparse.ArgumentParser()
    add_retrieval_arguments(parser)
    assert retrieval_overrides(parser.parse_args([])) == {}
    given = retrieval_overrides(parser.parse_args(
        ["--rank", "16", "--alpha", "1", "--reg", "0.01", "--choice-half-life", "24h",
         "--choice-dim", "24"]))
    assert given == {"rank": 16, "alpha": 1.0, "reg": 0.01, "choice_dim": 24,
                     "choice_half_life": timedelta(hours=24)}
    assert type(given["alpha"]) is float and type(given["rank"]) is int
    config = retrieval_config(**given)
    assert (config.rank, config.alpha, config.reg, config.max_iter) == (16, 1.0, 0.01, 10)
    assert (config.choice_dim, config.choice_half_life, config.choice_reg) == (
        24, timedelta(hours=24), 0.02)


def test_bad_values_are_named():
    with pytest.raises(ConfigError, match=r"invalid retrieval settings \(.*reg"):
        retrieval_config(reg=-1.0)
    with pytest.raises(ConfigError, match="alpha"):
        retrieval_config(alpha=0.0)


def test_the_job_rejects_a_bad_flag_before_any_work(caplog):
    with caplog.at_level(logging.ERROR):
        code = _job().main([*INTERVAL, "--reg", "-1"])
    assert code == ConfigError.exit_code
    assert "reg" in caplog.text


def test_the_job_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        _job().main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in (("--rank", 32), ("--max-iter", 10), ("--alpha", 10.0), ("--reg", 0.1),
                          ("--choice-dim", 16), ("--choice-steps", 300),
                          ("--choice-half-life", "3d")):
        assert flag in text and f"(default {default})" in text


def test_a_bad_or_zero_duration_is_refused_before_any_work(caplog):
    with caplog.at_level(logging.ERROR):
        code = _job().main([*INTERVAL, "--choice-half-life", "three days"])
    assert code == ConfigError.exit_code
    assert "three days" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        code = _job().main([*INTERVAL, "--choice-half-life", "0h"])
    assert code == ConfigError.exit_code
    assert "choice_half_life" in caplog.text


def test_durations_print_as_they_parse():
    from datetime import timedelta

    from solaris_lib.intervals import format_duration, parse_duration
    from solaris_lib.speculation.config import RetrievalConfig

    default = RetrievalConfig().choice_half_life
    assert parse_duration(format_duration(default)) == default
    for value, text in ((timedelta(minutes=90), "90m"), (timedelta(hours=36), "36h"),
                        (timedelta(days=14), "2w"), (timedelta(seconds=61), "61s")):
        assert format_duration(value) == text and parse_duration(text) == value
    with pytest.raises(ConfigError, match="whole number of seconds"):
        format_duration(timedelta(milliseconds=1500))


def _eval_args(*flags: str):
    import argparse

    from solaris_lib.speculation.commands import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["speculation-eval", "--logs", "x", "--cutoff", "2026-01-12",
                              "--budget-factor", "3", *flags])


def test_speculation_eval_passes_its_retrieval_flags_to_the_run():
    from datetime import UTC, datetime, timedelta

    from solaris_lib.speculation.evaluate import EvalRequest
    from solaris_lib.speculation.jobargs import retrieval_overrides

    args = _eval_args("--als-rank", "16", "--als-alpha", "1", "--als-reg", "0.01",
                      "--choice-reg", "0.05", "--choice-half-life", "1d")
    fields = retrieval_overrides(args)
    assert fields == {"rank": 16, "alpha": 1.0, "reg": 0.01, "choice_reg": 0.05,
                      "choice_half_life": timedelta(days=1)}
    assert retrieval_overrides(_eval_args()) == {}
    cutoff, week = datetime(2026, 1, 12, tzinfo=UTC), timedelta(days=7)
    request = EvalRequest("x", cutoff, week, 4 * week, budget_factor=3.0, retrieval_fields=fields)
    retrieval = request.retrieval()
    assert (retrieval.rank, retrieval.alpha, retrieval.reg, retrieval.max_iter) == (16, 1.0, 0.01, 10)
    assert (retrieval.choice_reg, retrieval.choice_half_life) == (0.05, timedelta(days=1))
    assert retrieval.lookback == 4 * week
    with pytest.raises(ConfigError, match="rank"):
        EvalRequest("x", cutoff, week, week, budget_factor=3.0, retrieval_fields={"rank": 1})
    with pytest.raises(ConfigError, match="choice_dim"):
        EvalRequest("x", cutoff, week, week, budget_factor=3.0, retrieval_fields={"choice_dim": 1})


def test_als_blocks_follow_the_rated_pairs_within_bounds():
    from solaris_lib.speculation.retrieval import als_blocks

    config = RetrievalConfig()
    assert [als_blocks(n, config) for n in (0, 14_000, 200_000, 330_000, 10**9)] == \
        [2, 2, 2, 4, 1000]
    assert als_blocks(330_000, RetrievalConfig(pairs_per_block=10_000)) == 33
