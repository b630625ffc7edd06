"""The one runner of every entrypoint in ``jobs/``: arguments, logging, Spark, exit codes, report.

A job is three functions (:class:`Job`): ``add_arguments`` adds its flags to a parser that
already has ``--start`` and ``--end`` (the data interval), ``prepare`` turns the parsed flags
and the settings into a typed request (bad input raises a :class:`ConfigError` here, before
Spark starts), and ``run`` does the work and returns the report. :func:`run_job` does the rest
the same way for every job: INFO logging to stderr, the SparkSession (``solaris-<name>``,
master and resources from spark-submit) stopped whatever happens, a :class:`SolarisError`
logged and turned into its exit code, and the report printed as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from solaris_lib.config import SolarisSettings, load_settings
from solaris_lib.errors import SolarisError

log = logging.getLogger(__name__)


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """For jobs that take only the data interval."""


@dataclass(frozen=True)
class Job:
    """One spark-submit entrypoint.

    ``name``: the job's name (``solaris-<name>`` is its Spark application); ``description``:
    the entrypoint's docstring (its first line is the ``--help`` summary); ``prepare(args,
    settings)``: the typed request; ``run(spark, settings, request)``: the report (a dict, or
    an object with ``as_dict()``); ``spark``: False for jobs that start no SparkSession (``run``
    then gets None).
    """

    name: str
    description: str
    prepare: Callable[[argparse.Namespace, SolarisSettings], Any]
    run: Callable[[Any, SolarisSettings, Any], Any]
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    spark: bool = True

    def parser(self) -> argparse.ArgumentParser:
        """``--start``/``--end`` and the job's own flags (which may redefine those two)."""
        parser = argparse.ArgumentParser(prog=f"{self.name}.py", conflict_handler="resolve",
                                         description=self.description.strip().splitlines()[0])
        parser.add_argument("--start", required=True, help="data interval start (ISO-8601, UTC)")
        parser.add_argument("--end", required=True,
                            help="data interval end, exclusive (ISO-8601, UTC)")
        self.add_arguments(parser)
        return parser


def run_job(job: Job, argv: Sequence[str] | None = None) -> int:
    """Run ``job`` with ``argv`` (default: the process's); returns the exit code."""
    args = job.parser().parse_args(argv)
    configure_logging()
    try:
        settings = load_settings()
        request = job.prepare(args, settings)
        report = _run(job, settings, request)
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    payload = report.as_dict() if hasattr(report, "as_dict") else report
    sys.stdout.write(json.dumps(payload, default=str) + "\n")
    return 0


def _run(job: Job, settings: SolarisSettings, request: Any) -> Any:
    if not job.spark:
        return job.run(None, settings, request)
    from solaris_lib.sparkutil import get_spark

    spark = get_spark(f"solaris-{job.name}")
    try:
        return job.run(spark, settings, request)
    finally:
        spark.stop()


def configure_logging() -> None:
    """INFO to stderr with time, level and logger; py4j's chatter only from WARNING."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
