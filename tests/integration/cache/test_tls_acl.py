"""TLS and ACL users through the URL, on a private server with a throw-away CA."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import redis

from solaris_lib.cache.errors import PublishError
from solaris_lib.cache.publish import PublishConfig, publish
from solaris_lib.client import SolarisClient
from solaris_lib.devtools.redis_server import free_port
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.cache.conftest import (
    INTERVAL,
    embeddings_table,
    expected_vectors,
    write_embeddings,
)
from tests.integration.cache.test_client import put_version

pytestmark = pytest.mark.integration
VERSION = "20260105T100000Z-aaaaaaaaaa"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1, made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make test certificates")
    folder = tmp_path_factory.mktemp("tls")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=solaris-test-ca")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
    return folder


@pytest.fixture
def tls_server(private_redis, certificates):
    """Plain port for setup (default user), TLS port and an ACL user for the code under test."""
    tls_port = free_port()
    server = private_redis(
        "--tls-port", str(tls_port), "--tls-cert-file", str(certificates / "server.crt"),
        "--tls-key-file", str(certificates / "server.key"),
        "--tls-ca-cert-file", str(certificates / "ca.crt"), "--tls-auth-clients", "no",
        "--user", "solaris", "on", ">s3cret", "~*", "&*", "+@all")
    ca = certificates / "ca.crt"
    return server, f"rediss://solaris:s3cret@127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}", tls_port


def test_lookups_over_tls_as_an_acl_user(tls_server):
    server, url, _ = tls_server
    put_version(redis.Redis.from_url(server.url), "p", VERSION, {7: {1: [1, 2]}}, dim=2)
    with SolarisClient.from_url(url, key_prefix="p", timeout_ms=TEST_TIMEOUT_MS) as client:
        result = client.lookup(7, [1, 2])
        assert result.hit.tolist() == [True, False]
        assert result.embeddings[0].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("problem", ["wrong_password", "untrusted_ca"])
def test_refused_sessions_are_counted_never_raised(tls_server, problem):
    server, url, port = tls_server
    put_version(redis.Redis.from_url(server.url), "p", VERSION, {7: {1: [1, 2]}}, dim=2)
    if problem == "wrong_password":
        url = url.replace("s3cret", "wrong")
    else:
        url = f"rediss://solaris:s3cret@127.0.0.1:{port}/0"  # the system store lacks our CA
    with SolarisClient.from_url(url, key_prefix="p", timeout_ms=TEST_TIMEOUT_MS, dim=2) as client:
        result = client.lookup(7, [1])
        assert not result.hit.any() and result.embeddings.shape == (1, 2)
        stats = client.stats()
    assert stats.refresh_errors >= 1 and client.version is None


def test_the_acl_user_is_the_one_connected(tls_server):
    server, url, _ = tls_server
    put_version(redis.Redis.from_url(server.url), "p", VERSION, {7: {1: [1, 2]}}, dim=2)
    with SolarisClient.from_url(url, key_prefix="p", timeout_ms=TEST_TIMEOUT_MS) as client:
        client.lookup(7, [1])
        users = {c["user"] for c in redis.Redis.from_url(server.url).client_list()}
    assert "solaris" in users


@pytest.mark.slow
def test_publish_over_tls_as_an_acl_user(tls_server, spark, settings_for):
    server, url, _ = tls_server
    settings = settings_for(url)
    table = embeddings_table(users=5, per_user=4)
    write_embeddings(settings, table)
    report = publish(spark, settings, INTERVAL, PublishConfig())
    assert report.status == "published"
    with SolarisClient.from_url(url, key_prefix=settings.redis_key_prefix, timeout_ms=TEST_TIMEOUT_MS) as client:
        for (user, item), want in expected_vectors(table).items():
            assert np.array_equal(client.lookup(user, [item]).embeddings[0], want)


def _wrong_host_certificate(folder):
    """A server certificate from the same CA for another host name only."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "wrong.key", "-out", "wrong.csr", "-subj", "/CN=wrong.example")
    (folder / "wrong.ext").write_text("subjectAltName=DNS:wrong.example\n")
    run("x509", "-req", "-in", "wrong.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "wrong.crt", "-days", "2", "-extfile", "wrong.ext")
    return folder / "wrong.crt", folder / "wrong.key"


def _tls_args(certificates, cert, key, tls_port):
    return ("--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file",
            str(key), "--tls-ca-cert-file", str(certificates / "ca.crt"),
            "--tls-auth-clients", "no")


@pytest.mark.slow
def test_least_privilege_users_over_tls_in_a_named_database(private_redis, certificates, spark,
                                                            settings_for):
    """The documented publisher and reader users (no CONFIG; +select for a database other
    than 0), over TLS, on database 2: the publish lands there, the reader serves it; a
    publisher user without +select is refused before anything is written."""
    from tests.integration.reliability.test_security import PUBLISHER, READER, P

    port = free_port()
    no_select = ("--user", "noselect", "on", ">ns-pw", *PUBLISHER[4:])
    server = private_redis(*_tls_args(certificates, certificates / "server.crt",
                                      certificates / "server.key", port),
                           *PUBLISHER, "+select", *READER, "+select", *no_select)
    ca = certificates / "ca.crt"
    url = f"rediss://{{}}@127.0.0.1:{port}/2?ssl_ca_certs={ca}"
    settings = settings_for(url.format("publisher:pub-pw"), P)
    table = embeddings_table(users=4, per_user=3)
    write_embeddings(settings, table)
    report = publish(spark, settings, INTERVAL, PublishConfig())
    assert report.status == "published"
    admin = redis.Redis.from_url(server.url)
    assert admin.dbsize() == 0 and redis.Redis.from_url(server.url[:-1] + "2").dbsize() > 0
    with SolarisClient.from_url(url.format("reader:read-pw"), key_prefix=P,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.version == report.version
        for (user, item), want in expected_vectors(table).items():
            assert np.array_equal(client.lookup(user, [item]).embeddings[0], want)
    with pytest.raises(PublishError, match="select") as caught:
        publish(spark, settings_for(url.format("noselect:ns-pw"), P), INTERVAL, PublishConfig())
    assert "ns-pw" not in str(caught.value)


def test_a_certificate_for_another_host_is_refused(private_redis, certificates, spark,
                                                   settings_for):
    cert, key = _wrong_host_certificate(certificates)
    port = free_port()
    server = private_redis(*_tls_args(certificates, cert, key, port))
    put_version(redis.Redis.from_url(server.url), "p", VERSION, {7: {1: [1, 2]}}, dim=2)
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certificates / 'ca.crt'}"
    with SolarisClient.from_url(url, key_prefix="p", timeout_ms=TEST_TIMEOUT_MS,
                                dim=2) as client:
        assert client.version is None and not client.lookup(7, [1]).hit.any()
        assert client.stats().refresh_errors >= 1
    settings = settings_for(url, "p")
    write_embeddings(settings, embeddings_table(users=2, per_user=2))
    with pytest.raises(PublishError, match="(?i)hostname|IP address mismatch|certificate"):
        publish(spark, settings, INTERVAL, PublishConfig())
    unchecked = url + "&ssl_check_hostname=false"  # the documented, explicit opt-out
    with SolarisClient.from_url(unchecked, key_prefix="p", timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.lookup(7, [1]).hit.tolist() == [True]
