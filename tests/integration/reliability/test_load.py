"""A short run of the load benchmark: readers in several processes while a version is published.

The 60 s figures come from ``benchmarks/load.py``; this checks correctness only (no timing).
"""

from __future__ import annotations

import pytest

from solaris_lib.devtools.loadtest import LoadConfig, run_load

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # two Spark publishes: 30-50 s


def test_readers_in_two_processes_see_no_error_and_no_mix_during_a_publish(spark):
    config = LoadConfig(processes=2, seconds=4, rate=40, users=20, items=200, dim=64,
                        publish_at=0.1, after_publish_s=1.5, timeout_ms=1000)
    figures = run_load(spark, config)
    assert figures["lookups"] > 0
    assert figures["errors"] == 0 and figures["timeouts"] == 0
    assert figures["mixed_versions"] == 0 and figures["exceptions"] == 0
    assert sum(figures["phases"][p]["lookups"] for p in ("before", "during", "after")) == \
        figures["lookups"]
    assert all(figures["phases"][p]["mixed_versions"] == figures["phases"][p]["exceptions"] == 0
               for p in ("before", "during", "after"))
    assert figures["lookups_with_misses"] == 0
    assert figures["publish_status"] == "published"
    assert figures["first_version"] != figures["second_version"]
    # both versions were read: the switch happened under the readers
    assert figures["lookups_v1"] > 0 and figures["lookups_v2"] > 0
    assert figures["lookups_v1"] + figures["lookups_v2"] == figures["lookups"]
