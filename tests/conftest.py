"""Shared fixtures: real services for integration tests, small worlds, and Airflow's environment.

Airflow reads its configuration at import: the variables below are set before anything imports
it, so tests never touch ~/airflow or a shared metadata DB.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="solaris-test-airflow-"))
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault(
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
)
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_BIN = os.path.dirname(sys.executable)
if not os.environ.get("PATH", "").startswith(_BIN):
    os.environ["PATH"] = f"{_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="session")
def redis_url():
    """URL of a real Redis server: the configured one when it answers, else a private one."""
    from solaris_lib.devtools.redis_server import RedisServer, answers

    url = os.environ.get("SOLARIS_REDIS_URL", "redis://127.0.0.1:6379/0")
    if answers(url):
        yield url
        return
    with RedisServer() as server:
        yield server.url


@pytest.fixture
def key_prefix(redis_url):
    """A unique key prefix for one test; every key under it is deleted afterwards (never FLUSH)."""
    from solaris_lib.devtools.redis_server import delete_matching

    prefix = f"solaris-test-{uuid.uuid4().hex[:10]}"
    yield prefix
    delete_matching(redis_url, f"*{prefix}*")


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession shared by the whole test session (start-up costs seconds)."""
    from solaris_lib.sparkutil import get_spark

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its shutdown lines outlive pytest's capture
    session = get_spark("solaris-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def _release_spark_memory():
    """After each module, drop what its tests cached (tests call stage functions such as
    ``mined_in_memory`` directly, without the runs' own release) and free the JVM plans and
    broadcasts of its dropped DataFrames (``sparkutil.collect_garbage``): the session is
    shared by the whole run and has 2g."""
    yield
    from pyspark.sql import SparkSession

    from solaris_lib.sparkutil import collect_garbage

    session = SparkSession.getActiveSession()
    if session is not None:
        session.catalog.clearCache()
        collect_garbage(session)


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A small simulated world (300 users, 3 days) shared read-only by many tests."""
    from solaris_lib.simulate.config import WorldConfig
    from solaris_lib.simulate.world import Simulator

    out = tmp_path_factory.mktemp("tiny-world") / "logs"
    Simulator(WorldConfig(users=300, items=400, days=3, seed=3)).run(str(out))
    return out
