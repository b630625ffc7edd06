"""The small helpers behind the reliability work: disk-full detection, executor errors,
the publisher's probe plan."""

from __future__ import annotations

import errno
import re
from pathlib import Path

from redis.crc import key_slot

from solaris_lib.cache.access import CHECK_SCRIPT, NEEDED, master_tags
from solaris_lib.errors import OutputWriteError
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
    full = executor_contract_error("solaris_lib.errors.OutputWriteError: quarantining 3 rows "
                                   "of a to b failed: no space left on device\n")
    assert isinstance(full, OutputWriteError) and full.exit_code == 7
    assert str(full) == "quarantining 3 rows of a to b failed: no space left on device"


REDIS_COMMANDS = {"GET", "SET", "SETEX", "MSET", "DEL", "UNLINK", "EXPIRE", "PEXPIRE", "HSET",
                  "HMSET", "HDEL", "HGET", "HMGET", "HLEN", "HGETALL", "HSCAN", "SCAN",
                  "EVAL", "EVALSHA", "MULTI", "EXEC", "INFO", "CONFIG", "PING", "CLUSTER",
                  "XADD", "RENAME", "COPY", "FLUSHDB", "FLUSHALL", "ASKING"}


def test_the_access_check_covers_every_command_the_publisher_sends():
    root = Path(__file__).resolve().parents[3] / "solaris_lib" / "cache"
    words = set()
    for name in ("publish.py", "server.py", "writer.py", "pairs.py", "fallback.py",
                 "retain.py", "connection.py"):
        words |= set(re.findall(r"\b[A-Z]{3,8}\b", (root / name).read_text()))
    sent = words & REDIS_COMMANDS
    assert {"HSET", "EXPIRE", "EVAL", "INFO", "HMGET"} <= sent  # the scan sees the writer
    checked = set(re.findall(r"\{'([A-Z]+)'", CHECK_SCRIPT))
    optional = {"CONFIG", "CLUSTER", "ASKING", "PING", "EVAL"}  # EVAL: the check runs as one
    assert sent - optional <= checked, sent - optional - checked
    assert all(f"+{c.lower()}" in NEEDED for c in checked | {"EVAL", "PING"})


def test_one_probe_tag_per_master():
    assert master_tags(["h:1"], lambda tag: "h:1") == {"h:1": ["0"]}
    assert master_tags(["h:1"], lambda tag: "h:1", 3) == {"h:1": ["0", "1", "2"]}
    owners = {range(0, 5461): "h:7000", range(5461, 10923): "h:7001",
              range(10923, 16384): "h:7002"}

    def owner(tag: str) -> str:
        slot = key_slot(tag.encode())
        return next(node for slots, node in owners.items() if slot in slots)

    found = master_tags(list(owners.values()), owner)
    assert sorted(found) == ["h:7000", "h:7001", "h:7002"]
    for node, [tag] in found.items():
        assert owner(tag) == node
        assert all(owner(str(smaller)) != node for smaller in range(int(tag)))
