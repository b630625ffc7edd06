"""The live-item knobs of speculate: job flags, then SOLARIS_SPECULATE_LIVE_* variables, then
the config's defaults; bad values fail with the field's name."""

from datetime import timedelta

import pytest

from solaris_lib.config import load_settings
from solaris_lib.errors import ConfigError
from solaris_lib.jobs.speculate import JOB
from solaris_lib.speculation.config import SpeculateConfig, speculate_config
from solaris_lib.speculation.jobargs import live_overrides

INTERVAL = ["--start", "2026-01-05T10:00", "--end", "2026-01-05T11:00"]


def _config(monkeypatch, env: dict, *flags: str) -> SpeculateConfig:
    for name in ("SOLARIS_SPECULATE_LIVE_WINDOW", "SOLARIS_SPECULATE_LIVE_GAPS",
                 "SOLARIS_SPECULATE_LIVE_TAIL_SHARE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = JOB.parser().parse_args([*INTERVAL, *flags])  # the speculate job's own flags
    return speculate_config(budget_per_user=10, **live_overrides(args, load_settings()))


def test_defaults_when_neither_flag_nor_variable_is_given(monkeypatch):
    config = _config(monkeypatch, {})
    assert (config.live_window, config.live_gaps, config.live_tail_share) == (
        timedelta(days=2), 3.0, 0.02)


def test_variables_apply_and_flags_win_over_them(monkeypatch):
    env = {"SOLARIS_SPECULATE_LIVE_WINDOW": "5d", "SOLARIS_SPECULATE_LIVE_GAPS": "0",
           "SOLARIS_SPECULATE_LIVE_TAIL_SHARE": "0.1"}
    config = _config(monkeypatch, env)
    assert (config.live_window, config.live_gaps, config.live_tail_share) == (
        timedelta(days=5), 0.0, 0.1)  # 0 is a value (off), not "unset"
    config = _config(monkeypatch, env, "--live-window", "12h", "--live-tail-share", "0")
    assert (config.live_window, config.live_gaps, config.live_tail_share) == (
        timedelta(hours=12), 0.0, 0.0)


def test_bad_values_name_the_knob(monkeypatch):
    with pytest.raises(ConfigError, match="not a duration"):
        _config(monkeypatch, {}, "--live-window", "two days")
    with pytest.raises(ConfigError, match="live_gaps"):
        _config(monkeypatch, {}, "--live-gaps", "-1")
    with pytest.raises(ConfigError, match="speculate_live_window"):
        _config(monkeypatch, {"SOLARIS_SPECULATE_LIVE_WINDOW": "2 days"})


def test_max_per_user_without_a_global_budget_is_ignored_with_a_warning(monkeypatch, caplog):
    for name in ("SOLARIS_SPECULATE_GLOBAL_BUDGET", "SOLARIS_SPECULATE_MAX_PER_USER"):
        monkeypatch.delenv(name, raising=False)
    # the DAG passes 0 for a param left null
    args = JOB.parser().parse_args([*INTERVAL, "--max-per-user", "50", "--global-budget", "0"])
    _, config, _ = JOB.prepare(args, load_settings())
    assert config.user_cap() == config.budget_per_user
    assert "max_per_user 50 ignored" in caplog.text
    caplog.clear()
    args = JOB.parser().parse_args([*INTERVAL, "--max-per-user", "50", "--global-budget", "900"])
    _, config, _ = JOB.prepare(args, load_settings())
    assert config.user_cap() == 50 and "ignored" not in caplog.text
