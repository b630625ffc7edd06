"""One way to start Spark for every SOLARIS job, test and CLI command.

Jobs launched by spark-submit get their master and resources from spark-submit; code that runs
outside it (tests, ``solaris speculation-eval``) passes ``master`` explicitly. Sessions always
use UTC so that timestamps mean the same thing on every machine.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from solaris_lib.errors import MissingDependencyError

log = logging.getLogger(__name__)

# Every session, whatever its submission says: log hours and partitions are UTC.
REQUIRED_CONF = {"spark.sql.session.timeZone": "UTC"}
# Every session's defaults: a job's submission (spark-submit's --conf, e.g. the spark_default
# connection's conf) may set any of them otherwise.
DEFAULT_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    # PySpark's daemon, quiet about workers whose task ended before reading all their output
    # (solaris_lib/sparkdaemon.py): no BrokenPipeError tracebacks on stderr in a successful run
    "spark.python.daemon.module": "solaris_lib.sparkdaemon",
    # Compiled query code is cached per JVM, 100 classes by default: one speculate run
    # generates ~400 distinct ones, so each run compiled them all again (405 compiles, ~8 ms
    # of CPU each). 2,000 keep a job's and a session's runs compiled (~8 KB of metaspace each).
    "spark.sql.codegen.cache.maxEntries": "2000",
    # PySpark records the Python call site of every Column and function call for the
    # "== DataFrame ==" part of analysis errors: five JVM round trips and a Python stack walk
    # each (F.col ~1 ms). Off, a repeated speculate run on the tests' world in one session takes
    # 9.3 s instead of 10.9;
    # an analysis error still names what failed (its Python traceback points at the action).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    # With no UI nobody reads the status store, but it keeps the last 1000 SQL executions with
    # their plan descriptions: with the scorer's deep plans that grew by ~80 MB per evaluation.
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    # A local session runs many short jobs in one small heap: let the ContextCleaner find the
    # broadcasts of dropped plans every 30 s rather than every 30 min (see collect_garbage).
    "spark.cleaner.periodicGC.interval": "30s",
    # Adaptive execution plans each query stage again once the one before it ran: worth it for
    # large shuffles, pure overhead for a local run's many small queries (speculation-eval of
    # a small log 56 s against 68 s; on the default world's 2.9M rows the same within noise).
    "spark.sql.adaptive.enabled": "false",
}


TASKS_PER_CORE = 2


def local_cores(master: str) -> int:
    """Cores of a local master: ``local`` 1, ``local[N]`` and ``local[N,F]`` N, ``local[*]``
    this machine's, ``local-cluster[W,C,M]`` W x C."""
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?|local-cluster\[(\d+),(\d+),\d+\]",
                         master.replace(" ", ""))
    if found is None:
        raise ValueError(f"not a local Spark master: {master!r}")
    threads, workers, cores = found.groups()
    if workers:
        return int(workers) * int(cores)
    if threads == "*":
        return os.cpu_count() or 1
    return int(threads or 1)


def local_conf(master: str) -> dict[str, str]:
    """The properties of every local master, in-process sessions and local spark-submit jobs
    alike: :data:`LOCAL_CONF` plus two shuffle partitions and tasks per core (a local run's jobs
    are many and small, and each partition costs a task per stage; docs/scaling.md)."""
    tasks = str(TASKS_PER_CORE * local_cores(master))
    return {**LOCAL_CONF, "spark.sql.shuffle.partitions": tasks,
            "spark.default.parallelism": tasks}


def _under_spark_submit() -> bool:
    """Whether this Python was started by spark-submit (its JVM left the gateway's port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _prepare_environment() -> None:
    """Executors must run this interpreter (the venv), Spark binds to loopback locally, and
    a driver JVM this process starts maps the installation's class archive (``sparkcds``).
    Under spark-submit the JVM runs already: nothing to add."""
    if not _under_spark_submit():
        from solaris_lib import sparkcds

        sparkcds.use()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    bindir = os.path.dirname(sys.executable)
    if not os.environ.get("PATH", "").startswith(bindir):
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def _submitted_properties() -> set[str]:
    """Names of the properties the launching spark-submit holds (its ``--conf``, e.g. the
    ``spark_default`` connection's, and ``spark-defaults.conf``); empty outside spark-submit."""
    if not _under_spark_submit():
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # spark-submit's JVM: SparkConf() reads its properties
    return {key for key, _ in SparkConf().getAll()}


def get_spark(app_name: str, master: str | None = None, conf: dict[str, str] | None = None):
    """Get or create the SparkSession for ``app_name``.

    ``master`` None means "whatever spark-submit configured" (the job case); pass one for
    tests and CLI runs. :data:`DEFAULT_CONF` fills what the submission did not set,
    :data:`REQUIRED_CONF` always applies. Local
    masters get small shuffles, no UI and ``SOLARIS_SPARK_LOCAL_MEMORY`` (2g) of memory.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise MissingDependencyError("pyspark", "Spark jobs") from exc
    _prepare_environment()
    builder = SparkSession.builder.appName(app_name)
    submitted = _submitted_properties()
    settings = {key: value for key, value in DEFAULT_CONF.items() if key not in submitted}
    settings.update(REQUIRED_CONF)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            from solaris_lib.config import load_settings

            settings.update(local_conf(master))
            settings["spark.driver.memory"] = load_settings().spark_local_memory
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextmanager
def spark_session(app_name: str, master: str | None = None,
                  conf: dict[str, str] | None = None) -> Iterator:
    """The session for one job or command, stopped at the end only if this call started it.

    A caller's active session (a test's, a notebook's) is reused and left running: stopping
    it would break every later user of that process's SparkContext.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise MissingDependencyError("pyspark", "Spark jobs") from exc
    shared = SparkSession.getActiveSession()
    spark = shared or get_spark(app_name, master=master, conf=conf)
    try:
        yield spark
    finally:
        if shared is None:
            spark.stop()


def collect_garbage(spark) -> None:
    """Free what DataFrames nobody references any more still hold in the driver's JVM.

    PySpark DataFrames caught in Python reference cycles keep their JVM query plans alive until
    Python's cycle collector runs, and every plan keeps the tables of its broadcast joins in the
    driver's memory (in local mode, the executors' memory too). One JVM GC then lets Spark's
    ContextCleaner drop those broadcasts, which it otherwise does only every
    ``spark.cleaner.periodicGC.interval`` (30 min; 30 s in local sessions). The cleaner works
    asynchronously, so the memory comes back over the next collections: measured on the tiny
    test world, 1.17 GB of a 2 GB heap still live after one ``speculation-eval`` run, 0.26 GB
    10 s later. Call it between whole runs (an evaluation, one interval of the transfer
    report), not in loops.
    """
    import gc

    gc.collect()
    spark.sparkContext._jvm.java.lang.System.gc()


def task_gpu(visible: int | None = None) -> int | None:
    """The GPU Spark assigned to the running task, as a CUDA ordinal: the first address of its
    ``gpu`` resource (``spark.task.resource.gpu.amount`` with the executors' GPUs found by a
    discovery script). None outside a task or without one: the process's default device then
    serves, which is right for an executor that sees one GPU (a Kubernetes pod) and would put
    every task of a multi-GPU executor on the first. ``visible``: the GPUs this process sees
    (an address beyond them is a :class:`ConfigError`, not a wrong or opaque device)."""
    from solaris_lib.errors import ConfigError

    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    context = TaskContext.get()
    gpu = None if context is None else context.resources().get("gpu")
    if gpu is None or not gpu.addresses:
        return None
    address = gpu.addresses[0]
    if not address.isdigit() or (visible is not None and int(address) >= visible):
        raise ConfigError(
            f"Spark assigned GPU {address!r} to this task, which is not one of the {visible} "
            "GPUs this process sees by CUDA ordinal: the discovery script must print CUDA's "
            "indices (nvidia-smi's, with CUDA_DEVICE_ORDER=PCI_BUS_ID, and none hidden by "
            "CUDA_VISIBLE_DEVICES)")
    return int(address)


def exact_sum(column):
    """Aggregate column: the sum of a double ``column`` over a group, as a double, independent
    of the order Spark adds the rows in.

    Each value is rounded to 18 decimals and summed as DECIMAL(38, 18), which is exact (up to
    1e20 in magnitude); a float sum differs in its last bits between two runs of one interval,
    which is enough to reorder tied candidates and change what a rerun writes.
    """
    from pyspark.sql import functions as F

    return F.sum(column.cast("decimal(38,18)")).cast("double")


# The key under which Spark stores a written DataFrame's schema (JSON) in each parquet footer.
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"


def read_parquet(spark, path: str):
    """``spark.read.parquet(path)`` with the schema Spark wrote into the footer of ``path`` (a
    file) or of the folder's first data file, when it has one: Spark infers a folder's schema by a job of its own (one
    task reading a footer), about a tenth of a second each, and a run reads dozens of tables.
    A folder written by another tool (no such key) or without data files is inferred as
    before; the result is the same DataFrame either way."""
    schema = written_schema(path)
    return (spark.read if schema is None else spark.read.schema(schema)).parquet(path)


def written_schema(path: str):
    """The ``StructType`` Spark recorded in the footer of ``path`` (a file) or of the first
    data file under it (one footer read on the driver); None without data files or without
    the key."""
    import json

    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from pyspark.sql.types import StructType

    from solaris_lib.storage import filesystem, list_files

    fs, inner = filesystem(path)
    if fs.get_file_info(inner).type != pafs.FileType.File:
        files = list_files(path)
        if not files:
            return None
        fs, inner = filesystem(files[0])
    with fs.open_input_file(inner) as handle:
        metadata = pq.ParquetFile(handle).metadata.metadata or {}
    text = metadata.get(SPARK_SCHEMA_KEY)
    return None if text is None else StructType.fromJson(json.loads(text))
