"""The ``solaris`` command line: one subcommand per capability, each defined by its stage.

Every stage exposes ``register(subparsers)`` in a ``commands`` module; a subcommand's handler
takes the parsed arguments and returns an exit code. :class:`SolarisError` subclasses become a
one-line message on stderr and their exit code (2 for bad input, see ``errors``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from solaris_lib import __version__
from solaris_lib.errors import SolarisError

COMMAND_MODULES = (
    "solaris_lib.simulate.commands",
    "solaris_lib.logs.commands",
    "solaris_lib.cache.commands",
    "solaris_lib.client.commands",
    "solaris_lib.model.commands",
    "solaris_lib.speculation.commands",
    "solaris_lib.transfer.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="solaris",
        description="SOLARIS: speculative precompute of foundation-model embeddings.",
    )
    parser.add_argument("--version", action="version", version=f"solaris {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def configure_logging(verbose: bool) -> None:
    """Progress lines on stderr, so that ``--json`` output on stdout stays machine-readable."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "urllib3", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ModuleNotFoundError as exc:  # the base install is the lookup client alone
        print(f"solaris: the command line needs the batch extra (missing {exc.name}): "
              "pip install 'solaris-precompute[batch]'", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.handler(args) or 0)
    except SolarisError as exc:
        print(f"solaris {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
