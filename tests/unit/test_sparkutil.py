"""Local masters' shuffle sizing (sparkutil.local_shuffle_conf): one rule for in-process
sessions and local spark-submit jobs."""

import os

import pytest

from solaris_lib.sparkutil import local_cores, local_shuffle_conf


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[2]", 2), ("local[16,3]", 16), ("local[*]", os.cpu_count()),
    ("local[*, 4]", os.cpu_count()), ("local-cluster[2,3,1024]", 6)])
def test_local_cores(master, cores):
    assert local_cores(master) == cores


@pytest.mark.parametrize("master", ["spark://m:7077", "yarn", "local[x]", "local[2"])
def test_a_master_that_is_not_local_is_refused(master):
    with pytest.raises(ValueError, match="not a local Spark master"):
        local_cores(master)


def test_two_tasks_per_core():
    assert local_shuffle_conf("local[2]") == {"spark.sql.shuffle.partitions": "4",
                                              "spark.default.parallelism": "4"}
