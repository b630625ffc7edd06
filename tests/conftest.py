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

from solaris_lib import sparkcds

ROOT = Path(__file__).resolve().parents[1]


def _own_airflow_home() -> str | None:
    """One Airflow home and metadata DB per test process, under one temporary folder of the
    session: each xdist worker (PYTEST_XDIST_WORKER, set before this file is imported) gets its
    own, so one worker's ``dag.test`` never replaces another's DAG run of the same logical
    date, and DAGs parsed with another worker's settings (asset URIs) never deactivate its
    assets. An AIRFLOW_HOME the caller set is left alone. Returns the folder when this process
    made it (:func:`pytest_sessionfinish` removes it)."""
    base, made = os.environ.get("TESTS_AIRFLOW_BASE"), None
    if base is None:
        if "AIRFLOW_HOME" in os.environ:
            return None
        base = made = tempfile.mkdtemp(prefix="solaris-test-airflow-")
        os.environ["TESTS_AIRFLOW_BASE"] = base
    home = Path(base) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    home.mkdir(parents=True, exist_ok=True)
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    return made


_AIRFLOW_BASE = _own_airflow_home()


def pytest_sessionfinish(session, exitstatus) -> None:
    """The session's Airflow homes (metadata DBs, task logs) go once every test passed (the
    process that made them: xdist's controller, after its workers); kept for a failed run."""
    import shutil

    if _AIRFLOW_BASE is not None and exitstatus == 0:
        shutil.rmtree(_AIRFLOW_BASE, ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# One compute thread per process: the suite runs on as many xdist workers as cores, and torch's
# small ops across two threads on a busy core spend most of their time waiting for each other.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# The simulator writes each hour's logs whole, without the producer's _SUCCESS marker: its hours
# are complete as soon as written, so the sensor need not wait the quiet period (the tests of
# that contract set their own).
os.environ.setdefault("SOLARIS_LOG_QUIET_PERIOD", "0s")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Every Spark driver of the suite (the in-process sessions, the spark-submit jobs of the DAGs and
# of the CLI tests) is a short JVM that plans many small queries, on a CPU-bound two-core
# machine: C1 only and the parallel collector (sparkcds.SMALL_MACHINE_JVM says why). spark-submit
# passes SPARK_SUBMIT_OPTS to the driver JVM; set it to override.
os.environ.setdefault("SPARK_SUBMIT_OPTS", sparkcds.SMALL_MACHINE_JVM)
# ... and with the installation's class archive when infra/services.sh built it (sparkcds.py)
sparkcds.use()
# the suite's own SOLARIS_* settings (above) and the caller's, before any fixture ran
_SUITE_SETTINGS = {k: v for k, v in os.environ.items() if k.startswith("SOLARIS_")}
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
def _suite_settings(request):
    """A module outside the pipeline group (tests/scheduling.py) sees the suite's SOLARIS_*
    settings only: the shared ``pipeline`` fixture points every later job of its xdist worker
    at its world through them for the rest of the session (a DAG parsed under its key prefix
    names its assets after it)."""
    from tests.scheduling import work_group

    if work_group(request.node.nodeid) == "pipeline":
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("SOLARIS_") and k not in _SUITE_SETTINGS]:
            patch.delenv(key)
        for key, value in _SUITE_SETTINGS.items():
            patch.setenv(key, value)
        yield


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


# ``make test`` runs the suite on two xdist workers: tests/scheduling.py makes the work units.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole modules and shared-fixture groups as work units (xdist's own ``loadgroup`` cannot
    mark node ids under pytest 9, whose node id is read-only)."""
    from tests.scheduling import make_scheduler

    return make_scheduler(config, log)


def pytest_collection_modifyitems(config, items):
    """A test using a costly session fixture must be in a file its group lists."""
    from tests.scheduling import SHARED_FIXTURE_PATHS

    for item in items:
        for fixture, paths in SHARED_FIXTURE_PATHS.items():
            if fixture in item.fixturenames and not item.nodeid.startswith(paths):
                raise pytest.UsageError(
                    f"{item.nodeid} uses the session fixture {fixture!r}: add its file to "
                    "SHARED_FIXTURE_PATHS in tests/scheduling.py so that one xdist worker builds it")
