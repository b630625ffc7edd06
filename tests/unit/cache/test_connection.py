"""redis-py arguments from the one URL parser, and redis-py's errors in the cache's tree."""

import pytest
import redis

from solaris_lib.cache.connection import connection_kwargs, translated
from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.cache.errors import (
    CacheConnectionError,
    CacheProtocolError,
    CacheTimeoutError,
)


def test_a_plain_url_gives_credentials_database_and_timeouts_without_retries():
    kwargs = connection_kwargs(Endpoint.from_url("redis://reader:s%40cret@h:6390/3"), 0.02)
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("reader", "s@cret", 3)
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 0.02
    assert kwargs["retry"].get_retries() == 0 and kwargs["protocol"] == 2
    assert "ssl" not in kwargs


def test_tls_options_reach_redis_py_and_cluster_urls_have_no_database():
    url = ("rediss+cluster://u:p@h1:7000,h2:7001?ssl_ca_certs=/ca.pem&ssl_cert_reqs=optional"
           "&ssl_check_hostname=false")
    kwargs = connection_kwargs(Endpoint.from_url(url), 1.0)
    assert kwargs["ssl"] is True and kwargs["ssl_ca_certs"] == "/ca.pem"
    assert (kwargs["ssl_cert_reqs"], kwargs["ssl_check_hostname"]) == ("optional", False)
    assert "db" not in kwargs
    assert Endpoint.from_url(url).nodes == (("h1", 7000), ("h2", 7001))


@pytest.mark.parametrize("raised, caught", [
    (redis.TimeoutError("slow"), CacheTimeoutError),
    (redis.ConnectionError("refused"), CacheConnectionError),
    (redis.AuthenticationError("bad password"), CacheConnectionError),
    (ConnectionResetError("reset"), CacheConnectionError),
    (redis.ResponseError("NOPERM"), CacheProtocolError),
])
def test_redis_py_errors_become_the_caches(raised, caught):
    with pytest.raises(caught, match="doing it"):
        with translated("doing it"):
            raise raised
