"""The one runner of every entrypoint in ``jobs/``: arguments, logging, Spark, exit codes, report.

A job is three functions (:class:`Job`): ``add_arguments`` adds its flags to a parser that
already has ``--start`` and ``--end`` (the data interval), ``prepare`` turns the parsed flags
and the settings into a typed request (bad input raises a :class:`ConfigError` here, before
any work), and ``run`` does the work and returns the report. :func:`run_job` does the rest
the same way for every job: INFO logging to stderr, the SparkSession (``solaris-<name>``,
master and resources from spark-submit) stopped whatever happens (a caller's active session
is reused and left running), the settings the submitter
forwarded applied to the driver's environment (:func:`apply_forwarded_settings`), a
:class:`SolarisError` logged and turned into its exit code, and the report printed as one JSON
line on stdout and written with the run's interval (:func:`solaris_lib.runs.write_report`),
where the DAG's task reads it whatever machine the driver ran on (cluster deploy mode); a later
run at the same start with another end is refused before any work, even beside a run that
failed midway (:func:`~solaris_lib.runs.claimed`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, MutableMapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from solaris_lib.config import SolarisSettings, load_settings
from solaris_lib.errors import ConfigError, SolarisError
from solaris_lib.intervals import Interval
from solaris_lib.runs import claimed, write_report

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
    then gets None); ``keyed``: whether its outputs are partitions keyed by the interval (a run
    is then refused beside another run's partitions of another length:
    :func:`solaris_lib.runs.claim_interval`).
    """

    name: str
    description: str
    prepare: Callable[[argparse.Namespace, SolarisSettings], Any]
    run: Callable[[Any, SolarisSettings, Any], Any]
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    spark: bool = True
    keyed: bool = True

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
        interval = Interval.parse(args.start, args.end)
        settings, report = _run(job, args, interval)
        text = write_report(settings, job.name, interval, report)
    except SolarisError as exc:
        log.error("%s", exc)
        return exc.exit_code
    sys.stdout.write(text + "\n")
    return 0


def _run(job: Job, args: argparse.Namespace, interval: Interval) -> tuple[SolarisSettings, Any]:
    """The settings and the report. A Spark job starts its session first: the settings the
    submitter forwarded as properties apply to the driver before the settings are read. An
    executor's failure that is a log-contract or full-disk error comes out as that error (its
    exit code, 2 or 7, and a message naming the file), not as Spark's."""
    from solaris_lib.logs.reader import contract_errors_from_executors

    if not job.spark:
        settings = load_settings()
        with contract_errors_from_executors():
            return settings, _prepared_run(job, None, settings, args, interval)
    from solaris_lib.sparkutil import spark_session

    with spark_session(f"solaris-{job.name}") as spark:
        apply_forwarded_settings(dict(spark.sparkContext.getConf().getAll()))
        settings = load_settings()
        with contract_errors_from_executors():
            return settings, _prepared_run(job, spark, settings, args, interval)


def _prepared_run(job: Job, spark, settings: SolarisSettings, args: argparse.Namespace,
                  interval: Interval) -> Any:
    """The job's report: its request prepared (a bad flag is refused before anything is
    recorded), a keyed job's interval claimed (refused beside partitions of another length;
    the claim withdrawn when the run fails having written nothing:
    :func:`~solaris_lib.runs.claimed`), then the run."""
    request = job.prepare(args, settings)
    with claimed(settings, job.name, interval) if job.keyed else nullcontext():
        return job.run(spark, settings, request)


def apply_forwarded_settings(conf: dict[str, str],
                             environ: MutableMapping[str, str] | None = None) -> None:
    """The driver's side of :mod:`solaris_lib.orchestration.sparkconf`: a ``SOLARIS_*``
    setting the submitter forwarded (``spark.executorEnv.NAME``) and the driver's environment
    lacks is set from it (client mode, standalone cluster mode; the driver's own environment
    wins); a setting the submitter listed in ``spark.solaris.settings`` that is still missing
    (a secret, which is never a property) stops the job before it falls back to a default."""
    from solaris_lib.orchestration.sparkconf import SETTINGS_PROPERTY, missing_settings

    environ = os.environ if environ is None else environ
    for key, value in conf.items():
        name = key.removeprefix("spark.executorEnv.")
        if name != key and name.startswith("SOLARIS_"):
            environ.setdefault(name, value)
    missing = missing_settings(conf, environ)
    if missing:
        raise ConfigError(
            f"the driver's environment lacks {', '.join(missing)}, which the DAG's task had "
            f"({SETTINGS_PROPERTY}); secrets are never Spark properties: in cluster deploy mode "
            "give them to the driver by the cluster manager's convention (docs/scaling.md, "
            "'Settings and secrets')")


def configure_logging() -> None:
    """INFO to stderr with time, level and logger; py4j's chatter only from WARNING."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
