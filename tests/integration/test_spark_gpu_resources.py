"""Inference and FAISS search run on the GPU Spark assigned to each task. A real Spark
application (``local-cluster``: a standalone worker and an executor JVM) is offered two GPUs
with addresses 3 and 5 by a discovery script, one per task: each task reads its own address.
The machine needs no GPU: Spark schedules what the script reports."""

import json
import subprocess
import sys

import pytest

from solaris_lib.sparkutil import task_gpu

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APP = r"""
import json, sys
from pyspark.sql import SparkSession

script = sys.argv[1]
spark = (SparkSession.builder.master("local-cluster[1,2,1024]")
         .config("spark.worker.resource.gpu.amount", "2")
         .config("spark.worker.resource.gpu.discoveryScript", script)
         .config("spark.executor.resource.gpu.amount", "2")
         .config("spark.executor.resource.gpu.discoveryScript", script)
         .config("spark.task.resource.gpu.amount", "1").getOrCreate())

def addresses(batches):
    import pandas as pd
    from solaris_lib.errors import ConfigError
    from solaris_lib.sparkutil import task_gpu
    for batch in batches:
        try:
            seen_by_four = task_gpu(visible=4) is not None  # a process seeing GPUs 0-3
        except ConfigError:
            seen_by_four = False
        yield pd.DataFrame({"gpu": [task_gpu()] * len(batch), "four": [seen_by_four] * len(batch)})

rows = spark.range(0, 8, numPartitions=8).mapInPandas(addresses, "gpu int, four boolean").collect()
print(json.dumps([[r.gpu, r.four] for r in rows]))
spark.stop()
"""


def test_each_task_reads_the_gpu_spark_assigned_to_it(tmp_path):
    script = tmp_path / "gpus.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["3", "5"]}\'\n')
    script.chmod(0o755)
    done = subprocess.run([sys.executable, "-c", APP, str(script)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(rows) == 8 and {gpu for gpu, _ in rows} <= {3, 5}
    # an address the process cannot see is a clear error, not another GPU or an opaque one
    assert all(four == (gpu == 3) for gpu, four in rows)


def test_without_gpu_resources_a_task_has_none(spark):
    def addresses(batches):
        import pandas as pd

        for batch in batches:
            yield pd.DataFrame({"gpu": [task_gpu()] * len(batch)})

    rows = spark.range(0, 2, numPartitions=2).mapInPandas(addresses, "gpu int").collect()
    assert [r.gpu for r in rows] == [None, None]
    assert task_gpu() is None  # on the driver, outside a task
