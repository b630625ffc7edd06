"""Local masters' properties (sparkutil.local_conf): one rule for in-process sessions and
local spark-submit jobs."""

import os

import pytest

from solaris_lib.sparkutil import LOCAL_CONF, local_conf, local_cores


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[2]", 2), ("local[16,3]", 16), ("local[*]", os.cpu_count()),
    ("local[*, 4]", os.cpu_count()), ("local-cluster[2,3,1024]", 6)])
def test_local_cores(master, cores):
    assert local_cores(master) == cores


@pytest.mark.parametrize("master", ["spark://m:7077", "yarn", "local[x]", "local[2"])
def test_a_master_that_is_not_local_is_refused(master):
    with pytest.raises(ValueError, match="not a local Spark master"):
        local_cores(master)


def test_two_tasks_per_core_and_no_ui():
    conf = local_conf("local[2]")
    assert conf["spark.sql.shuffle.partitions"] == conf["spark.default.parallelism"] == "4"
    assert conf["spark.ui.enabled"] == "false" and LOCAL_CONF.items() <= conf.items()
    assert local_conf("local[*]")["spark.sql.shuffle.partitions"] == str(2 * os.cpu_count())
