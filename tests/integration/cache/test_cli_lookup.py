"""``solaris cache-lookup`` as an operator runs it, against a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

from tests.cachespec import put_version

pytestmark = pytest.mark.integration
VERSION = "20260105T100000Z-aaaaaaaaaa"


def cache_lookup(redis_url: str, prefix: str, *args: str) -> tuple[int, dict]:
    env = {**os.environ, "SOLARIS_REDIS_URL": redis_url, "SOLARIS_REDIS_KEY_PREFIX": prefix}
    run = subprocess.run([sys.executable, "-m", "solaris_lib.cli", "cache-lookup", *args],
                         capture_output=True, text=True, timeout=120, env=env)
    return run.returncode, json.loads(run.stdout.strip().splitlines()[-1])


def test_lookup_prints_hits_and_levels(redis_url, key_prefix):
    r = redis.Redis.from_url(redis_url)
    put_version(r.execute_command, key_prefix, VERSION, {7: {2: [0.5, -4]}}, dim=2)
    r.close()
    code, out = cache_lookup(redis_url, key_prefix, "7", "2", "99")
    assert code == 0 and (out["version"], out["error"]) == (VERSION, None)
    assert out["hit"] == [True, False] and out["level"] == [1, 0]  # EXACT, MISS
    assert out["embeddings"] == [[0.5, -4.0, "..."], [0.0, 0.0, "..."]]


def test_lookup_without_a_served_version_exits_5(redis_url, key_prefix):
    code, out = cache_lookup(redis_url, key_prefix, "7", "2")
    assert code == 5 and out["error"] == "no_version" and out["hit"] == [False]
