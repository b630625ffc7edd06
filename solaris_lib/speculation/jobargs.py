"""Arguments shared by the speculation jobs (spark-submit entrypoints in ``jobs/``)."""

from __future__ import annotations

import argparse

from solaris_lib.intervals import parse_duration


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


ALS_FIELDS = ("rank", "max_iter", "alpha", "reg")


def add_als_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--{prefix}rank``, ``--{prefix}max-iter``, ``--{prefix}alpha``, ``--{prefix}reg``: the
    ALS knobs of :class:`RetrievalConfig`, each defaulting to the config's value."""
    from solaris_lib.speculation.config import RetrievalConfig

    for name in ALS_FIELDS:
        field = RetrievalConfig.model_fields[name]
        parser.add_argument(f"--{prefix}{name.replace('_', '-')}", type=field.annotation, default=None,
                            dest=f"als_{name}", help=f"ALS: {field.description.rstrip('.')} "
                            f"(default {field.default})")


def als_overrides(args) -> dict:
    """The :class:`RetrievalConfig` fields given by :func:`add_als_arguments`'s flags."""
    values = {name: getattr(args, f"als_{name}") for name in ALS_FIELDS}
    return {name: value for name, value in values.items() if value is not None}


def live_overrides(args, settings) -> dict:
    """The live-item fields of :class:`SpeculateConfig` given by flags (first) or settings.

    ``args`` carries :func:`add_live_arguments`'s flags; ``settings`` is a ``SolarisSettings``.
    Fields given by neither keep the config's defaults. Values are checked by the config.
    """
    window = args.live_window or settings.speculate_live_window
    fields = {
        "live_window": parse_duration(window) if window else None,
        "live_gaps": _first_given(args.live_gaps, settings.speculate_live_gaps),
        "live_tail_share": _first_given(args.live_tail_share, settings.speculate_live_tail_share),
    }
    return {name: value for name, value in fields.items() if value is not None}


def _first_given(*values):
    return next((v for v in values if v is not None), None)
