"""How a job is submitted per cluster manager and deploy mode: Spark properties (local defaults
only for local[N], the connection's conf over them), settings forwarded to the driver and the
executors by each manager's convention, secrets never in a property, the application and main
class; the DAGs' run parameters and assets."""

from __future__ import annotations

import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from solaris_lib.config import load_settings
from solaris_lib.intervals import Interval
from solaris_lib.orchestration.dagspec import SCORERS, job_path
from solaris_lib.orchestration.sparkconf import (
    PYTHON_RUNNER,
    RUNNER_JAR,
    SETTINGS_PROPERTY,
    SparkTarget,
    missing_settings,
    submission,
)
from solaris_lib.runs import read_report, write_report

SETTINGS = {"SOLARIS_DATA_ROOT": "hdfs://nn/solaris", "SOLARIS_REDIS_KEY_PREFIX": "prod",
            "SOLARIS_REDIS_URL": "redis+cluster://cache-0:6379,cache-1:6379",
            "SOLARIS_AIRFLOW_DB_URL": "postgresql://airflow:pw@db/airflow"}
SECRET_URL = "rediss://publisher:S3cret-pw@cache:6380/0"
ARGS = ["--start", "2026-01-05T10:00:00+00:00", "--end", "2026-01-05T11:00:00+00:00"]
JOB = job_path("mine_logs")


def submit(master: str, mode: str = "client", **extra):
    target = SparkTarget.from_connection(master, {"deploy-mode": mode, **extra})
    return submission(target, JOB, ARGS, SETTINGS)


def test_local_defaults_only_for_local_masters_and_the_connection_conf_wins():
    local = submit("local[2]").conf
    assert local["spark.sql.shuffle.partitions"] == "4" and local["spark.ui.enabled"] == "false"
    assert local["spark.default.parallelism"] == "4"  # two tasks per core
    for master in ("spark://m:7077", "yarn", "k8s://https://api:6443"):
        conf = submit(master).conf
        assert "spark.sql.shuffle.partitions" not in conf and "spark.ui.enabled" not in conf
        assert conf["spark.sql.session.timeZone"] == "UTC"
    tuned = submit("yarn", conf={"spark.sql.shuffle.partitions": 400, "spark.executor.memory": "8g"})
    assert tuned.conf["spark.sql.shuffle.partitions"] == "400"
    assert tuned.conf["spark.executor.memory"] == "8g"


@pytest.mark.parametrize("master, mode, driver_prefix", [
    ("local[2]", "client", None),
    ("spark://m:7077", "client", None),
    ("spark://m:7077", "cluster", None),  # the submission gateway copies the environment
    ("yarn", "client", None),
    ("yarn", "cluster", "spark.yarn.appMasterEnv."),
    ("k8s://https://api:6443", "cluster", "spark.kubernetes.driverEnv."),
])
def test_settings_reach_executors_and_cluster_drivers(master, mode, driver_prefix):
    conf = submit(master, mode).conf
    for name in ("SOLARIS_DATA_ROOT", "SOLARIS_REDIS_KEY_PREFIX", "SOLARIS_REDIS_URL"):
        assert conf[f"spark.executorEnv.{name}"] == SETTINGS[name]
        if driver_prefix:
            assert conf[f"{driver_prefix}{name}"] == SETTINGS[name]
    drivers = [k for k in conf if "appMasterEnv" in k or "driverEnv" in k]
    assert bool(drivers) == bool(driver_prefix)
    assert conf[SETTINGS_PROPERTY].split(",") == [
        "SOLARIS_DATA_ROOT", "SOLARIS_REDIS_KEY_PREFIX", "SOLARIS_REDIS_URL"]
    assert not any("AIRFLOW_DB" in key or "pw@db" in value for key, value in conf.items())


def test_a_url_with_a_password_is_never_a_property_but_is_required():
    target = SparkTarget.from_connection("k8s://https://api:6443", {"deploy-mode": "cluster"})
    planned = submission(target, JOB, ARGS, {**SETTINGS, "SOLARIS_REDIS_URL": SECRET_URL})
    assert not any("S3cret-pw" in f"{k}={v}" for k, v in planned.conf.items())
    assert "SOLARIS_REDIS_URL" in planned.conf[SETTINGS_PROPERTY].split(",")
    assert missing_settings(planned.conf, {"SOLARIS_DATA_ROOT": "x",
                                           "SOLARIS_REDIS_KEY_PREFIX": "p"}) == ["SOLARIS_REDIS_URL"]
    assert missing_settings(planned.conf, {**SETTINGS, "SOLARIS_REDIS_URL": SECRET_URL}) == []


def test_the_application_per_manager_and_mode():
    assert submit("yarn", "cluster").application == JOB  # spark-submit uploads it
    assert submit("k8s://https://api:6443", "cluster").application == f"local://{JOB}"
    moved = submit("k8s://https://api:6443", "cluster", **{"solaris-jobs": "local:///opt/jobs"})
    assert moved.application == "local:///opt/jobs/mine_logs.py"
    standalone = submit("spark://m:7077", "cluster")
    assert standalone.java_class == PYTHON_RUNNER and standalone.application == str(RUNNER_JAR)
    assert standalone.application_args == [JOB, "", *ARGS]
    client = submit("spark://m:7077")
    assert client.java_class is None and client.application_args == ARGS
    with zipfile.ZipFile(RUNNER_JAR) as jar:
        assert jar.read("META-INF/MANIFEST.MF").startswith(b"Manifest-Version: 1.0")


def test_jobs_ship_in_the_package_and_the_dag_scorers_are_the_jobs():
    from solaris_lib.jobs import JOBS
    from solaris_lib.jobs.speculate import SCORERS as JOB_SCORERS

    assert SCORERS == JOB_SCORERS
    for job in JOBS:
        path = Path(job_path(job))
        assert path.is_file() and path.parent.name == "jobs" and path.parent.parent.name == "solaris_lib"


def test_the_report_round_trips_through_the_data_root(tmp_path):
    settings = load_settings(data_root=str(tmp_path))
    interval = Interval(datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))
    assert read_report(settings, "speculate", interval) is None
    write_report(settings, "speculate", interval, {"pairs": 12})
    write_report(settings, "speculate", interval, {"pairs": 13})  # a rerun replaces it
    assert read_report(settings, "speculate", interval) == {"pairs": 13}
    assert (tmp_path / "reports" / "speculate" / f"interval={interval.key}" / "report.json").is_file()


def test_the_driver_adopts_forwarded_settings_keeps_its_own_and_requires_secrets():
    from solaris_lib.errors import ConfigError
    from solaris_lib.orchestration.jobrunner import apply_forwarded_settings

    target = SparkTarget.from_connection("spark://m:7077", {"deploy-mode": "cluster"})
    conf = submission(target, JOB, ARGS, {**SETTINGS, "SOLARIS_REDIS_URL": SECRET_URL}).conf
    own = {"SOLARIS_DATA_ROOT": "/driver/own"}
    with pytest.raises(ConfigError, match="lacks SOLARIS_REDIS_URL"):
        apply_forwarded_settings(conf, own)
    assert own == {"SOLARIS_DATA_ROOT": "/driver/own", "SOLARIS_REDIS_KEY_PREFIX": "prod"}
    given = {"SOLARIS_REDIS_URL": SECRET_URL}
    apply_forwarded_settings(conf, given)
    assert given == {"SOLARIS_REDIS_URL": SECRET_URL, "SOLARIS_DATA_ROOT": "hdfs://nn/solaris",
                     "SOLARIS_REDIS_KEY_PREFIX": "prod"}
