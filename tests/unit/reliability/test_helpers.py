"""The small helpers behind the reliability work: disk-full detection, executor errors,
the publisher's probe plan."""

from __future__ import annotations

import errno

from solaris_lib.cache.access import master_tags, probe_commands, probe_key
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.nodes import ClusterRouter, SingleRouter, key_slot
from solaris_lib.logs.reader import executor_contract_error
from solaris_lib.storage import is_disk_full


def test_disk_full_is_recognised_from_errno_text_and_causes():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(OSError("IOError: [errno 28] No space left on device"))
    try:
        try:
            raise OSError("java.io.IOException: No space left on device")
        except OSError as inner:
            raise RuntimeError("Job aborted due to stage failure") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(ValueError("bad value"))


def test_executor_contract_errors_are_parsed_from_spark_text():
    text = ("An exception was thrown from the Python worker:\nTraceback ...\n"
            "solaris_lib.errors.LogContractError: /d/dt=2026-01-05/hour=10/p.parquet: "
            "unreadable parquet file (Corrupt snappy compressed data.)\n\tat org.apache...")
    error = executor_contract_error(text)
    assert error.path == "/d/dt=2026-01-05/hour=10/p.parquet"
    assert error.problem == "unreadable parquet file (Corrupt snappy compressed data.)"
    assert error.exit_code == 2
    assert executor_contract_error("java.lang.OutOfMemoryError: Java heap space") is None


def test_probe_plan_covers_every_publisher_command():
    commands = probe_commands("p", "0")
    assert {c[0] for c in commands} == {"INFO", "HSET", "EXPIRE", "HLEN", "HMGET", "HGETALL",
                                       "EVAL", "GET"}
    assert all(probe_key("p", "0") in c[1:] or f"{probe_key('p', '0')}:s" in c[1:]
               for c in commands if c[0] != "INFO")


def test_one_probe_tag_per_master():
    single = SingleRouter(Endpoint.from_url("redis://127.0.0.1:1/0"))
    assert [tag for _, tag in master_tags(single)] == ["0"]
    cluster = ClusterRouter(Endpoint.from_url("redis+cluster://127.0.0.1:1"))
    cluster._apply_slots([[0, 5460, [b"127.0.0.1", 7000]], [5461, 10922, [b"127.0.0.1", 7001]],
                          [10923, 16383, [b"127.0.0.1", 7002]]], "127.0.0.1")
    found = master_tags(cluster)
    assert sorted(pool.address[1] for pool, _ in found) == [7000, 7001, 7002]
    for pool, tag in found:
        assert cluster.pool_for_slot(key_slot(tag.encode())) is pool
