"""A successful Spark run prints no Python daemon tracebacks: a task that ends before reading all
of a Python worker's output (``limit``, ``take``, ``first`` over Python code) closes the
worker's socket, and PySpark 4's own daemon prints the worker's BrokenPipeError; SOLARIS's
sessions use ``solaris_lib.sparkdaemon``, which ends such a worker quietly. The control run with
PySpark's daemon shows the traceback, so the scenario still provokes it."""

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EARLY_ENDS = r"""
import sys
from solaris_lib.sparkutil import get_spark

conf = {"spark.python.daemon.module": sys.argv[1]}
spark = get_spark("solaris-test-stderr", master="local[2]", conf=conf)
frame = spark.range(0, 2_000_000, numPartitions=4)
doubled = frame.mapInPandas(lambda batches: (b * 2 for b in batches), "id long")
print(doubled.limit(3).collect(), frame.rdd.map(lambda r: r.id).take(2), doubled.first())
spark.stop()
"""


def run_with(daemon_module: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", EARLY_ENDS, daemon_module], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[Row(id=0), Row(id=2), Row(id=4)] [0, 1] Row(id=0)" in done.stdout
    return done


def test_workers_cut_short_leave_no_traceback():
    assert "Traceback" not in run_with("solaris_lib.sparkdaemon").stderr
    assert "BrokenPipeError" in run_with("pyspark.daemon").stderr  # the control
