"""Who may read and write the cache: ACL users on a private redis-server started by the test.

* the publisher's user may write only under its key prefix;
* the client's user may only read (GET/HGETALL/HMGET on the prefix) and XADD to
  ``P:misses``; writes, FLUSHALL and CONFIG are refused;
* the client works under that read-only user (hits, and sampled misses reach the stream);
* a publish as a user that lacks a permission stops before it writes, saying what is missing;
* a malformed cache entry (wrong length, garbage, wrong key type) reads as a miss of the right
  shape, never an exception; passwords never appear in errors or log lines.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import redis

from solaris_lib.cache.access import probe_key
from solaris_lib.cache.errors import PublishError, PublishPermissionError
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import SolarisClient
from solaris_lib.devtools.redis_server import free_port
from tests.cachespec import bucket
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    write_embeddings,
)
from tests.integration.cache.test_client import put_version, wait_for

pytestmark = pytest.mark.integration
P = "acl"
VERSION = "20260105T100000Z-aaaaaaaaaa"
PUBLISHER = ("--user", "publisher", "on", ">pub-pw", "resetkeys", f"~{P}:*", "resetchannels",
             "-@all", "+ping", "+info", "+get", "+set", "+hset", "+hgetall", "+hmget", "+hlen",
             "+expire", "+ttl", "+scan", "+eval")
READER = ("--user", "reader", "on", ">read-pw", "resetkeys", f"%R~{P}:*", f"~{P}:misses",
          "resetchannels", "-@all", "+ping", "+get", "+getrange", "+hgetall", "+hmget", "+xadd")
# publisher users that may read but not write (with or without EVAL): a publish must refuse
# before its Spark work
READ_ONLY_PUBLISHER = ("--user", "weak", "on", ">weak-pw", "resetkeys", f"~{P}:*",
                       "resetchannels", "-@all", "+ping", "+info", "+get", "+hgetall", "+hmget",
                       "+hlen", "+config|get", "+eval")
NO_EVAL_PUBLISHER = ("--user", "noeval", "on", ">noeval-pw", "resetkeys", f"~{P}:*",
                     "resetchannels", "-@all", "+ping", "+info", "+get", "+set", "+hset",
                     "+hgetall", "+hmget", "+hlen", "+expire")


@pytest.fixture
def acl_server(private_redis):
    """A server whose default user (no password, for setup) sits beside three ACL users."""
    server = private_redis(*PUBLISHER, *READER, *READ_ONLY_PUBLISHER, *NO_EVAL_PUBLISHER)
    base = f"127.0.0.1:{server.port}/0"
    urls = {"admin": server.url, "publisher": f"redis://publisher:pub-pw@{base}",
            "reader": f"redis://reader:read-pw@{base}", "weak": f"redis://weak:weak-pw@{base}",
            "noeval": f"redis://noeval:noeval-pw@{base}"}
    return server, urls


def refused(call) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    except redis.exceptions.ResponseError as exc:
        return "NOPERM" in str(exc)
    return False


def test_publisher_user_writes_only_its_prefix(acl_server):
    _, urls = acl_server
    r = redis.Redis.from_url(urls["publisher"])
    r.hset(f"{P}:e:x:{{1}}", "5", b"ab")
    assert r.hmget(f"{P}:e:x:{{1}}", ["5"]) == [b"ab"]
    assert refused(lambda: r.set("other:key", "1"))
    assert refused(lambda: r.hset("other:e:x:{1}", "5", b"ab"))
    assert refused(r.flushall) and refused(lambda: r.config_set("maxmemory", "1"))
    assert refused(lambda: r.config_get("requirepass"))  # no CONFIG GET: it shows secrets
    assert refused(lambda: r.delete(f"{P}:alias"))


def test_reader_user_only_reads(acl_server):
    server, urls = acl_server
    put_version(redis.Redis.from_url(urls["admin"]), P, VERSION, {7: {1: [1, 2]}}, dim=2)
    r = redis.Redis.from_url(urls["reader"])
    key = f"{P}:e:{VERSION}:{{7}}:{bucket(1, 4)}"
    assert r.get(f"{P}:alias").decode() == VERSION
    assert r.hmget(key, ["1"])[0] == np.asarray([1, 2], "<f2").tobytes()
    r.xadd(f"{P}:misses", {"user": "7", "items": "9", "ts": "0"})
    assert refused(lambda: r.set(f"{P}:alias", "x"))
    assert refused(lambda: r.hset(key, "1", b"zz"))
    assert refused(lambda: r.delete(key))
    assert refused(lambda: r.expire(key, 1))
    assert refused(lambda: r.xadd(f"{P}:other", {"a": "1"}))
    assert refused(lambda: r.get("other:alias"))
    assert refused(r.flushall) and refused(r.flushdb)
    assert refused(lambda: r.config_get("*")) and refused(lambda: r.config_set("save", ""))
    assert refused(lambda: r.eval("return 1", 0)) and refused(r.keys)
    admin = redis.Redis.from_url(urls["admin"])
    assert admin.get(f"{P}:alias").decode() == VERSION
    assert admin.hget(key, "1") == np.asarray([1, 2], "<f2").tobytes()


def test_client_works_as_the_read_only_user(acl_server):
    _, urls = acl_server
    admin = redis.Redis.from_url(urls["admin"])
    put_version(admin, P, VERSION, {7: {1: [1, 2], 2: [3, 4]}}, dim=2)
    with SolarisClient.from_url(urls["reader"], key_prefix=P, miss_sample_rate=1.0,
                                timeout_ms=1000) as client:
        result = client.lookup(7, [2, 99, 1])
        assert result.hit.tolist() == [True, False, True] and result.error is None
        assert result.embeddings.tolist() == [[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]]
        wait_for(lambda: client.stats().misses_written == 1)
        stats = client.stats()
    assert stats.errors == 0 and stats.refresh_errors == 0 and stats.misses_dropped == 0
    ((_, fields),) = admin.xrange(f"{P}:misses")
    assert fields[b"items"] == b"99"
    users = {c["user"] for c in admin.client_list()}
    assert "reader" not in users  # closed


@pytest.mark.parametrize("user, command, reason", [
    ("weak", "HSET", "refused by the user's ACL"),
    ("noeval", "EVAL", "NOPERM"),
])
def test_publish_refuses_a_user_without_a_permission(acl_server, spark, settings_for, user,
                                                     command, reason):
    _, urls = acl_server
    admin = redis.Redis.from_url(urls["admin"])
    put_version(admin, P, VERSION, {7: {1: [1, 2]}}, dim=2)
    keys_before = sorted(admin.keys("*"))
    settings = settings_for(urls[user], P)
    write_embeddings(settings, embeddings_table(users=3, per_user=2))
    phases = []
    with pytest.raises(PublishPermissionError) as caught:
        publish(spark, settings, INTERVAL, PublishConfig(), on_phase=phases.append)
    message = str(caught.value)
    assert f"Redis user '{user}'" in message and f"may not run {command} on {P}:" in message
    assert reason in message and f"~{P}:*" in message
    assert "served version is unchanged" in message and "-pw" not in message
    assert caught.value.exit_code == 2 and phases == []  # stopped before reading its input
    assert sorted(admin.keys("*")) == keys_before  # the check wrote nothing


def test_wrong_password_fails_the_publish_without_showing_it(acl_server, spark, settings_for):
    _, urls = acl_server
    settings = settings_for(urls["publisher"].replace("pub-pw", "Wr0ng-pw"), P)
    write_embeddings(settings, embeddings_table(users=3, per_user=2))
    with pytest.raises(PublishError) as caught:
        publish(spark, settings, INTERVAL, PublishConfig())
    assert "WRONGPASS" in str(caught.value) and "Wr0ng-pw" not in str(caught.value)


@pytest.mark.slow
def test_publish_as_the_publisher_user_then_read_as_the_reader(acl_server, spark, settings_for):
    _, urls = acl_server
    settings = settings_for(urls["publisher"], P)
    table = embeddings_table(users=5, per_user=4, dim=8)
    write_embeddings(settings, table)
    report = publish(spark, settings, INTERVAL, PublishConfig())
    assert report.status == "published"
    admin = redis.Redis.from_url(urls["admin"])
    assert not admin.keys(f"{P}:probe:*") and probe_key(P, "0") == f"{P}:probe:{{0}}"
    with SolarisClient.from_url(urls["reader"], key_prefix=P, timeout_ms=1000) as client:
        for (user, item), want in expected_vectors(table).items():
            assert np.array_equal(client.lookup(user, [item]).embeddings[0], want)


def test_malformed_entries_read_as_misses_of_the_right_shape(private_redis):
    server = private_redis()
    admin = redis.Redis.from_url(server.url)
    put_version(admin, P, VERSION, {7: {1: [1, 2, 3, 4], 2: [5, 6, 7, 8]}}, dim=4)
    for item, value in {3: b"\x00" * 7, 4: b"garbage!" * 3, 5: b"", 6: b"\xff" * 8}.items():
        admin.hset(f"{P}:e:{VERSION}:{{7}}:{bucket(item, 4)}", str(item), value)
    for part in range(4):
        admin.set(f"{P}:e:{VERSION}:{{8}}:{part}", b"a string where a hash belongs")
        admin.rpush(f"{P}:e:{VERSION}:{{9}}:{part}", b"\x00" * 8)
    with SolarisClient.from_url(server.url, key_prefix=P, timeout_ms=1000) as client:
        result = client.lookup(7, [1, 3, 4, 5, 2, 6])
        assert result.embeddings.shape == (6, 4) and result.embeddings.dtype == np.float32
        # "6" is 8 bytes, the right length, but decodes to NaN: corrupt, never a hit
        assert result.hit.tolist() == [True, False, False, False, True, False]
        assert result.embeddings[1:4].tolist() == [[0.0] * 4] * 3
        assert result.embeddings[5].tolist() == [0.0] * 4
        assert result.embeddings[0].tolist() == [1, 2, 3, 4]
        for user in (8, 9, 8, 9):  # more than the breaker's threshold
            wrong = client.lookup(user, [1, 2, 3])
            assert wrong.embeddings.shape == (3, 4) and not wrong.hit.any()
            assert wrong.error == "server"
        assert client.lookup(7, [1]).hit.all()  # one bad key does not poison the client
        stats = client.stats()
    assert stats.corrupt_values == 4 and stats.server_errors == 4 and stats.breaker_opens == 0


def test_passwords_stay_out_of_client_logs(caplog, private_redis):
    server = private_redis()
    dead = f"redis://reader:T0psecret@127.0.0.1:{free_port()}/0"
    wrong = server.url.replace("redis://", "redis://reader:T0psecret@")
    with caplog.at_level(logging.DEBUG, logger="solaris_lib"):
        for url in (dead, wrong):
            with SolarisClient.from_url(url, key_prefix=P, dim=2, timeout_ms=200,
                                        background_timeout_ms=200) as client:
                assert not client.lookup(7, [1]).hit.any()
    assert caplog.records and "T0psecret" not in caplog.text


def test_cli_errors_never_show_the_password(acl_server, tmp_path):
    _, urls = acl_server
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")},
           "SOLARIS_REDIS_URL": urls["reader"].replace("read-pw", "Wr0ng-pw"),
           "SOLARIS_REDIS_KEY_PREFIX": P, "SOLARIS_DATA_ROOT": str(tmp_path)}
    for command in (["cache-info"], ["cache-lookup", "7", "1"]):
        run = subprocess.run([sys.executable, "-m", "solaris_lib.cli", *command], env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 5, run.stderr
        assert "Wr0ng-pw" not in run.stderr + run.stdout
    assert "WRONGPASS" in run.stderr + run.stdout or "refused" in run.stderr + run.stdout
