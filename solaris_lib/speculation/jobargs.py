"""Arguments shared by the speculation jobs (spark-submit entrypoints in ``jobs/``)."""

from __future__ import annotations

import argparse
from datetime import timedelta

from solaris_lib.intervals import format_duration, parse_duration


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    """``--live-window``, ``--live-gaps``, ``--live-tail-share``: which items are candidates."""
    parser.add_argument("--live-window", default=None,
                        help="items seen this long before the end are live, e.g. 2d (default: "
                        "SOLARIS_SPECULATE_LIVE_WINDOW, else 2d)")
    parser.add_argument("--live-gaps", type=float, default=None,
                        help="an item stays live this many of its own mean gaps after it was "
                        "last seen (default: SOLARIS_SPECULATE_LIVE_GAPS, else 3; 0: off)")
    parser.add_argument("--live-tail-share", type=float, default=None,
                        help="widen the live window until the items beyond it carried at most "
                        "this share of the previous interval's rows (default: "
                        "SOLARIS_SPECULATE_LIVE_TAIL_SHARE, else 0.02; 0: off)")


def default_lookback(config) -> str:
    """``config``'s default history window as a duration string, e.g. ``"4w"`` (``config``: the
    :class:`MineConfig` or :class:`RetrievalConfig` class)."""
    return format_duration(config.model_fields["lookback"].default)


def add_lookback_argument(parser: argparse.ArgumentParser, config) -> None:
    """``--lookback``: the history window before ``--end``, defaulting to ``config``'s (a
    :class:`MineConfig` or :class:`RetrievalConfig` class)."""
    default = default_lookback(config)
    parser.add_argument("--lookback", default=None, metavar="DURATION",
                        help=f"history window before --end, e.g. 7d (default {default})")


def given(**fields) -> dict:
    """The keyword arguments whose value is not None (flags the caller gave), for a config
    whose own defaults stand for the rest."""
    return {name: value for name, value in fields.items() if value is not None}


def lookback_override(args) -> dict:
    """``{"lookback": timedelta}`` when ``--lookback`` was given, else ``{}``."""
    return {"lookback": parse_duration(args.lookback)} if args.lookback else {}


ALS_FIELDS = ("rank", "max_iter", "alpha", "reg")
CHOICE_FIELDS = ("choice_dim", "choice_reg", "choice_steps", "choice_half_life")


def add_retrieval_arguments(parser: argparse.ArgumentParser, als_prefix: str = "") -> None:
    """The :class:`RetrievalConfig` knobs, each defaulting to the config's value: ALS's
    ``--{als_prefix}rank``, ``--{als_prefix}max-iter``, ``--{als_prefix}alpha``,
    ``--{als_prefix}reg`` and the choice model's ``--choice-dim``, ``--choice-reg``,
    ``--choice-steps``, ``--choice-half-life`` (a duration, e.g. 24h)."""
    from solaris_lib.speculation.config import RetrievalConfig

    for name in ALS_FIELDS + CHOICE_FIELDS:
        field = RetrievalConfig.model_fields[name]
        flag = f"{als_prefix}{name}" if name in ALS_FIELDS else name
        help_text = field.description.rstrip(".")
        if name in ALS_FIELDS:
            help_text = f"ALS: {help_text}"
        if field.annotation is timedelta:  # parsed by retrieval_overrides (ConfigError)
            kind, metavar = str, "DURATION"
            help_text += f"; a duration, e.g. 24h or 3d (default {format_duration(field.default)})"
        else:
            kind, metavar = field.annotation, name.upper()
            help_text += f" (default {field.default})"
        parser.add_argument(f"--{flag.replace('_', '-')}", type=kind, default=None,
                            dest=f"retrieval_{name}", metavar=metavar, help=help_text)


def retrieval_overrides(args) -> dict:
    """The :class:`RetrievalConfig` fields given by :func:`add_retrieval_arguments`'s flags
    (durations parsed: a bad one raises :class:`ConfigError`)."""
    from solaris_lib.speculation.config import RetrievalConfig

    fields = {}
    for name in ALS_FIELDS + CHOICE_FIELDS:
        value = getattr(args, f"retrieval_{name}")
        if value is None:
            continue
        duration = RetrievalConfig.model_fields[name].annotation is timedelta
        fields[name] = parse_duration(value) if duration else value
    return fields


def live_overrides(args, settings) -> dict:
    """The live-item fields of :class:`SpeculateConfig` given by flags (first) or settings.

    ``args`` carries :func:`add_live_arguments`'s flags; ``settings`` is a ``SolarisSettings``.
    Fields given by neither keep the config's defaults. Values are checked by the config.
    """
    window = args.live_window or settings.speculate_live_window
    return given(
        live_window=parse_duration(window) if window else None,
        live_gaps=_first_given(args.live_gaps, settings.speculate_live_gaps),
        live_tail_share=_first_given(args.live_tail_share, settings.speculate_live_tail_share),
    )


def _first_given(*values):
    return next((v for v in values if v is not None), None)
