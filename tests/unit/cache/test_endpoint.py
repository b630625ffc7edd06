"""Redis URLs: every documented form, and clear errors for the rest."""

import ssl

import pytest

from solaris_lib.cache.endpoint import Endpoint, TlsOptions, redact
from solaris_lib.cache.errors import CacheConfigError
from solaris_lib.errors import ConfigError


def test_plain_url_with_database():
    endpoint = Endpoint.from_url("redis://10.0.0.5:6380/3")
    assert endpoint == Endpoint(nodes=(("10.0.0.5", 6380),), db=3)
    assert not endpoint.cluster and endpoint.tls is None


def test_defaults_port_and_database():
    assert Endpoint.from_url("redis://cache").nodes == (("cache", 6379),)
    assert Endpoint.from_url("redis://cache").db == 0


def test_acl_user_and_percent_encoded_password():
    endpoint = Endpoint.from_url("redis://solaris:p%40ss%3Aword@cache:6379/0")
    assert (endpoint.username, endpoint.password) == ("solaris", "p@ss:word")


def test_password_only_forms_authenticate_the_default_user():
    assert Endpoint.from_url("redis://:secret@cache").username is None
    assert Endpoint.from_url("redis://:secret@cache").password == "secret"
    assert Endpoint.from_url("redis://secret@cache").password == "secret"


def test_cluster_scheme_with_several_seeds_and_ipv6():
    endpoint = Endpoint.from_url("redis+cluster://a:7000,b:7001,[::1]:7002")
    assert endpoint.cluster
    assert endpoint.nodes == (("a", 7000), ("b", 7001), ("::1", 7002))


def test_tls_options_and_secure_defaults():
    endpoint = Endpoint.from_url("rediss://cache:6380/0")
    assert endpoint.tls == TlsOptions()
    context = endpoint.tls.context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    relaxed = Endpoint.from_url("rediss+cluster://u:p@cache:7000?ssl_cert_reqs=none"
                                "&ssl_check_hostname=false")
    assert relaxed.cluster and relaxed.tls.cert_reqs == "none"
    assert relaxed.tls.context().verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize("url, problem", [
    ("http://cache:6379", "scheme"),
    ("redis://cache:0", "host:port"),
    ("redis://cache:99999", "host:port"),
    ("redis://cache:port", "host:port"),
    ("redis://cache/x", "database"),
    ("redis+cluster://cache:7000/2", "no databases"),
    ("redis://cache?ssl_ca_certs=/ca.pem", "rediss"),
    ("rediss://cache?ssl_ca_cert=/ca.pem", "unknown"),
    ("rediss://cache?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
])
def test_bad_urls_say_what_is_wrong(url, problem):
    with pytest.raises(CacheConfigError, match=problem):
        Endpoint.from_url(url)


def test_config_errors_are_also_solaris_config_errors():
    with pytest.raises(ConfigError):
        Endpoint.from_url("memcached://cache")


def test_passwords_never_appear_in_messages():
    assert redact("redis://u:topsecret@cache:6379/0") == "redis://u:***@cache:6379/0"
    with pytest.raises(CacheConfigError) as caught:
        Endpoint.from_url("redis://u:topsecret@cache:nope/0")
    assert "topsecret" not in str(caught.value)
    endpoint = Endpoint.from_url("rediss+cluster://u:topsecret@a:1,b:2")
    assert endpoint.redacted() == "rediss+cluster://u:***@a:1,b:2"
