"""Faults of the pipeline as the orchestrator runs it (issue 8): a log partition that is
missing (the sensor times out, nothing downstream runs) or late (the sensor succeeds once it
arrives), a Spark job SIGKILLed mid-stage then rerun (nothing half-written is visible, no orphan
process, identical outputs), and a foundation model whose outputs are NaN (``infer`` fails,
nothing is published, the client keeps the served version).

Each test drives real components: the repository's DAG through Airflow's ``dag.test`` (tasks
in-process, Spark tasks as spark-submit), spark-submit jobs in their own process group, Redis.
The other faults of the issue are in test_faults.py here and tests/integration/cache/.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris_lib.errors import EmptyInputError
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, MINED, SPECULATED, DataLayout
from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA, hour_partition
from solaris_lib.orchestration.dagspec import job_path
from solaris_lib.orchestration.sparkconf import SparkTarget, submission
from solaris_lib.speculation.io import read_partition
from solaris_lib.speculation.mine import SORT_KEYS
from solaris_lib.storage import is_complete, list_files
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.conftest import FIRST, ROOT, published_content, run_dag
from tests.nan_model import write_nan_copy

pytestmark = pytest.mark.integration
DAG_ID = "solaris_precompute"
DOWNSTREAM = ("mine", "speculate", "infer", "evaluate", "publish")
MINE_TABLES = tuple(SORT_KEYS)  # the five tables jobs/mine_logs.py writes, in write order
MINE = Interval(datetime(2026, 1, 7, 10, tzinfo=UTC), datetime(2026, 1, 7, 11, tzinfo=UTC))
MINE_LOOKBACK = "1d"  # of tiny_world's 3 days (2026-01-05 .. 07)
LATE = Interval(datetime(2026, 3, 2, 10, tzinfo=UTC), datetime(2026, 3, 2, 11, tzinfo=UTC))


def load_dag():
    """The precompute DAG as Airflow parses it (settings read from the environment now)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def task_states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def record_failures(dag, *task_ids: str) -> dict[str, BaseException]:
    """Sets an ``on_failure_callback`` (what an alert hook gets) on these tasks of ``dag``;
    returns the dict it fills with each failed task's exception."""
    failures: dict[str, BaseException] = {}
    for task_id in task_ids:
        dag.get_task(task_id).on_failure_callback = [  # a list, as the operator stores it
            lambda context, task_id=task_id: failures.setdefault(task_id, context["exception"])]
    return failures


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextmanager
def task_log_lines() -> Iterator[list[str]]:
    """Log lines of the tasks that ``dag.test`` runs meanwhile (spark-submit's output included:
    Airflow routes it through the root logger). Call after the DAG was loaded: loading Airflow
    configures logging, which replaces the root logger's handlers. (Not capfd: Airflow's handler
    would keep writing to that test's stream after it closed.)"""
    handler, root = _Lines(), logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)


def write_empty_hour(logs_root: Path, hour: datetime) -> Path:
    """An hour with no traffic: one empty parquet file in the contract schema, written under a
    hidden name and renamed, so a poke never sees a partial file."""
    folder = logs_root / hour_partition(hour)
    folder.mkdir(parents=True, exist_ok=True)
    hidden = folder / ".part-0.parquet.tmp"
    pq.write_table(REQUEST_LOG_SCHEMA.empty_table(), hidden)
    hidden.rename(folder / "part-0.parquet")
    return folder


@pytest.fixture
def bare_root(tmp_path, monkeypatch, airflow_db, key_prefix, redis_url):
    """A data root whose logs end one hour before ``LATE``; every SOLARIS_* variable the DAG's
    tasks read points at it (and at a key prefix of this test's own)."""
    root = tmp_path / "data"
    write_empty_hour(root / "logs", LATE.start - timedelta(hours=1))
    monkeypatch.setenv("SOLARIS_DATA_ROOT", str(root))
    monkeypatch.setenv("SOLARIS_REDIS_URL", redis_url)
    monkeypatch.setenv("SOLARIS_REDIS_KEY_PREFIX", key_prefix)
    return root


def test_missing_log_partition_times_out_and_nothing_downstream_runs(bare_root, key_prefix,
                                                                     redis_url, monkeypatch):
    import redis

    monkeypatch.setenv("SOLARIS_LOG_WAIT_TIMEOUT", "3s")
    dag = load_dag()
    sensor = dag.get_task("wait_for_logs")
    assert sensor.timeout == 3 and sensor.mode == "reschedule"
    sensor.poke_interval = 1  # the DAG's 60 s, shortened so the test pokes a few times
    failures = record_failures(dag, "wait_for_logs", *DOWNSTREAM)
    with task_log_lines() as lines:
        run = dag.test(logical_date=LATE.end)

    states = task_states(run)
    assert run.state == "failed" and states["wait_for_logs"] == "failed"
    missing = bare_root / "logs" / hour_partition(LATE.start)
    assert list(failures) == ["wait_for_logs"]
    assert str(failures["wait_for_logs"]) == (
        f"log partitions of {LATE} did not arrive within 3 s; missing: {missing}; downstream "
        "tasks will not run. Rerun the task once the logs are there.")
    assert any(f"waiting for 1 of 1 log partitions of {LATE}, first missing: {missing}" in line
               for line in lines)  # what each poke logs
    assert {task: states[task] for task in DOWNSTREAM} == dict.fromkeys(DOWNSTREAM,
                                                                         "upstream_failed")
    assert sorted(p.name for p in bare_root.iterdir()) == ["logs"]  # no stage wrote anything
    client = redis.Redis.from_url(redis_url)
    assert list(client.scan_iter(match=f"{key_prefix}*")) == []
    client.close()


def test_late_log_partition_lets_the_sensor_succeed(bare_root, monkeypatch):
    """The partition arrives (from another thread) after the sensor has poked twice; the next
    poke finds it. Only the sensor runs (a subset of the DAG), so nothing else is computed."""
    from solaris_lib.orchestration import tasks

    pokes, poked_twice = [], threading.Event()
    real = tasks.missing_log_partitions

    def counted(*args, **kwargs):
        missing = real(*args, **kwargs)
        pokes.append(len(missing))
        if len(pokes) >= 2:
            poked_twice.set()
        return missing

    monkeypatch.setattr(tasks, "missing_log_partitions", counted)
    monkeypatch.setenv("SOLARIS_LOG_WAIT_TIMEOUT", "120s")  # a bound, never reached
    dag = load_dag()
    dag.get_task("wait_for_logs").poke_interval = 1
    sensor_only = dag.partial_subset(["wait_for_logs"], include_downstream=False,
                                     include_upstream=False)

    def deliver():
        assert poked_twice.wait(timeout=120)
        write_empty_hour(bare_root / "logs", LATE.start)

    courier = threading.Thread(target=deliver, daemon=True)
    courier.start()
    run = sensor_only.test(logical_date=LATE.end)
    courier.join(timeout=5)
    assert task_states(run) == {"wait_for_logs": "success"} and run.state == "success"
    assert pokes[:2] == [1, 1] and pokes[-1] == 0


def spark_submit(job: str, interval: Interval, data_root: Path, output: Path,
                 *extra: str) -> subprocess.Popen:
    """``job`` as the DAG's SparkSubmitOperator starts it (``sparkconf.submission`` on local[2]),
    in a process group of its own (pgid = pid) so that the driver, its JVM and Python workers die
    together. Its output goes to the file ``output`` (a pipe nobody reads would stall the job)."""
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    settings = {"SOLARIS_DATA_ROOT": str(data_root)}
    app = submission(SparkTarget("local[2]"), job_path(job),
                     ["--start", interval.start.isoformat(), "--end", interval.end.isoformat(),
                      *extra], settings)
    conf = [arg for key, value in app.conf.items() for arg in ("--conf", f"{key}={value}")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")} | settings
    command = [submit, "--master", "local[2]", *conf, "--name", f"solaris-{job}",
               app.application, *app.application_args]
    with open(output, "w") as sink:
        return subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)


def first_running_write(stage_root: Path, process: subprocess.Popen, output: Path,
                        timeout_s: float = 600) -> Path:
    """Polls (every 10 ms) until a Spark write is in progress under ``stage_root``: a
    ``_temporary`` folder (Spark's output committer) inside a partition's staging folder.
    Returns that staging folder; fails if the job ends first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for staging in stage_root.glob("*/.interval=*.staging-*"):
            if (staging / "_temporary").is_dir():
                return staging
        if process.poll() is not None:
            pytest.fail(f"the job ended (exit {process.returncode}) before any write began:\n"
                        f"{output.read_text()[-3000:]}")
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"no Spark write began within {timeout_s} s")


def processes_with_env(marker: str) -> list[str]:
    """Live (not zombie) processes whose environment holds ``marker``: "pid command"."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()
        except OSError:  # exited meanwhile, or not ours to read
            continue
        if state != "Z":
            found.append(f"{proc.name} {command}")
    return found


def wait_until_gone(marker: str, timeout_s: float = 30) -> list[str]:
    """Processes still alive with ``marker`` after up to ``timeout_s`` (empty once all died)."""
    deadline = time.monotonic() + timeout_s
    while (alive := processes_with_env(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def read_rows(partition: str) -> pa.Table:
    """A partition's rows in file order (the jobs write sorted, range-partitioned files)."""
    return pa.concat_tables([pq.read_table(path) for path in list_files(partition)])


@pytest.mark.slow
def test_spark_job_killed_mid_stage_leaves_nothing_complete_and_rerun_is_identical(
        spark, tiny_world, tmp_path):
    """jobs/mine_logs.py under spark-submit, SIGKILLed (the whole process group: spark-submit,
    the driver's JVM and Python) as soon as its first partition write is running. The reference
    is an uninterrupted run of the same code in this session's SparkSession (another Spark
    application, so the outputs do not depend on the application either)."""
    from solaris_lib.intervals import parse_duration
    from solaris_lib.speculation.config import MineConfig
    from solaris_lib.speculation.pipeline import run_mine

    reference_root, root = tmp_path / "reference", tmp_path / "data"
    for folder in (reference_root, root):
        folder.mkdir()
        (folder / "logs").symlink_to(tiny_world, target_is_directory=True)
    reference = DataLayout(root=str(reference_root), models_root=str(reference_root / "models"))
    run_mine(spark, reference, MINE, MineConfig(lookback=parse_duration(MINE_LOOKBACK)))
    layout = DataLayout(root=str(root), models_root=str(root / "models"))

    killed_log = tmp_path / "killed.log"
    job = spark_submit("mine_logs", MINE, root, killed_log, "--lookback", MINE_LOOKBACK)
    staging = first_running_write(root / MINED, job, killed_log)
    os.killpg(job.pid, signal.SIGKILL)
    assert job.wait(timeout=60) == -signal.SIGKILL
    assert wait_until_gone(f"SOLARIS_DATA_ROOT={root}") == []  # no orphan JVM or worker

    killed_in = staging.parent.name
    assert not is_complete(layout.output(MINED, MINE, killed_in))
    for table in MINE_TABLES:
        final = layout.output(MINED, MINE, table)
        if is_complete(final):  # finished before the kill: complete and right
            assert read_rows(final).equals(read_rows(reference.output(MINED, MINE, table)))
            continue
        assert not Path(final).exists() and list_files(final) == []
        with pytest.raises(EmptyInputError, match="missing or incomplete"):
            read_partition(spark, final)
    leftovers = [p.name for p in (root / MINED).glob("*/*") if not is_complete(str(p))]
    assert leftovers and all(name.startswith(".") for name in leftovers)  # hidden from readers

    rerun_log = tmp_path / "rerun.log"
    rerun = spark_submit("mine_logs", MINE, root, rerun_log, "--lookback", MINE_LOOKBACK)
    assert rerun.wait(timeout=600) == 0, rerun_log.read_text()[-3000:]
    for table in MINE_TABLES:
        final, expected = layout.output(MINED, MINE, table), reference.output(MINED, MINE, table)
        assert is_complete(final), table
        got, want = read_rows(final), read_rows(expected)
        assert got.num_rows > 0 and got.equals(want), table


def served_state(pipeline, layout: DataLayout):
    """(version, every key and value of it, one user's lookup, the speculated partition's interval)
    as the client sees the cache now."""
    from solaris_lib.client import SolarisClient
    from solaris_lib.intervals import key_to_start

    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        version = client.version
        if version is None:
            return None
        start = key_to_start(version.split("-", 1)[0])
        interval = Interval(start, start + FIRST.length)
        pairs = pq.read_table(layout.output(SPECULATED, interval)).to_pandas()
        user = int(pairs["user_id"].iloc[0])
        items = pairs.loc[pairs["user_id"] == user, "item_id"].astype(int).tolist()
        found = client.lookup(user, items)
    assert found.hit.all()
    content = published_content(pipeline.redis_url, pipeline.key_prefix, version)
    return version, content, found.embeddings


def promote_nan_model(model_root: str) -> str:
    """A copy of the serving foundation model with NaN output weights, made the serving version
    (what a bad promotion does); returns the version it replaced."""
    from solaris_lib.model import artefact

    good = write_nan_copy(model_root, "nan-test")
    artefact.set_serving(model_root, "nan-test")
    return good


def partition_bytes(partition: str) -> dict[str, bytes]:
    return {Path(path).name: Path(path).read_bytes() for path in list_files(partition)}


@pytest.mark.slow
def test_nan_model_fails_infer_and_nothing_is_published(pipeline):
    """The precompute DAG rerun for FIRST (already run, and served or superseded, by the
    ``precompute_first`` fixture; run here first when alone) after a NaN model was
    promoted. ``mine``, ``speculate`` and ``evaluate`` are marked success (``dags test
    --mark-success-pattern``): their partitions of FIRST are complete and do not depend on the
    model, and running them again would add about a minute of Spark for nothing. ``infer`` runs
    for real (spark-submit) and must fail with NonFiniteOutputError; ``publish`` must not run."""
    from solaris_lib.config import SolarisSettings
    from solaris_lib.model import artefact

    settings = SolarisSettings(data_root=str(pipeline.data_root), redis_url=pipeline.redis_url,
                               redis_key_prefix=pipeline.key_prefix)
    layout = DataLayout.from_settings(settings)
    if served_state(pipeline, layout) is None or not is_complete(layout.output(SPECULATED, FIRST)):
        assert run_dag(DAG_ID, FIRST.end).state == "success"
    version, content, lookup = served_state(pipeline, layout)
    embeddings = layout.output(EMBEDDINGS, FIRST)
    before = partition_bytes(embeddings)
    assert before and is_complete(layout.output(MINED, FIRST, "user_history"))

    model_root = layout.model("foundation")
    good = promote_nan_model(model_root)
    try:
        dag = load_dag()
        dag.get_task("infer").retries = 0  # a retry fails the same way, after a 30 s delay
        failures = record_failures(dag, *DOWNSTREAM)
        run = dag.test(logical_date=FIRST.end, mark_success_pattern="mine|speculate|evaluate")
    finally:
        artefact.set_serving(model_root, good)

    states = task_states(run)
    assert run.state == "failed"
    assert states["infer"] == "failed" and states["publish"] == "upstream_failed", states
    assert list(failures) == ["infer"]
    # exit 5 from infer_embeddings.py is NonFiniteOutputError and nothing else (its docstring);
    # the job's own line goes to the task log, which dag.test does not route to the root logger
    assert "infer_embeddings.py" in str(failures["infer"])
    assert "Error code is: 5" in str(failures["infer"])
    assert partition_bytes(embeddings) == before and is_complete(embeddings)
    now_version, now_content, now_lookup = served_state(pipeline, layout)
    assert now_version == version and now_content == content
    assert (now_lookup == lookup).all()
