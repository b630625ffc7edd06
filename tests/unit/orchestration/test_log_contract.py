"""The log producer's contract, on real files: an hour partition is complete with its
``_SUCCESS`` marker, or once its newest file is older than the quiet period."""

import os
import time

import pyarrow.parquet as pq

from solaris_lib.logs.schema import REQUEST_LOG_SCHEMA
from solaris_lib.orchestration.tasks import hour_complete


def test_an_hour_is_complete_with_its_marker_or_after_the_quiet_period(tmp_path):
    folder = tmp_path / "dt=2026-01-05" / "hour=10"
    assert not hour_complete(str(folder), quiet_s=60)  # nothing yet
    folder.mkdir(parents=True)
    pq.write_table(REQUEST_LOG_SCHEMA.empty_table(), folder / "part-0.parquet")
    assert not hour_complete(str(folder), quiet_s=60)  # a file just arrived: still open
    assert hour_complete(str(folder), quiet_s=60, now=time.time() + 61)
    old = time.time() - 120
    os.utime(folder / "part-0.parquet", (old, old))
    assert hour_complete(str(folder), quiet_s=60)
    pq.write_table(REQUEST_LOG_SCHEMA.empty_table(), folder / "part-1.parquet")
    assert not hour_complete(str(folder), quiet_s=60)  # a later file reopens the quiet period
    (folder / "_SUCCESS").touch()
    assert hour_complete(str(folder), quiet_s=3600)  # the producer says it is done
