"""RedisTransport's pipelines: a failed exchange raises whatever redis-py client ran it (its
cluster pipeline returns a node's timeout among the replies; the real servers are exercised in
tests/integration/cache)."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ResponseError

from solaris_lib.cache.endpoint import Endpoint
from solaris_lib.client import CacheConnectionError, CacheTimeoutError
from solaris_lib.client._transport import RedisTransport


class Pipeline:
    """A redis-py pipeline double answering ``replies`` whatever is queued."""

    def __init__(self, replies: list) -> None:
        self.replies, self.queued = replies, []

    def execute_command(self, *command) -> None:
        self.queued.append(command)

    def execute(self, raise_on_error: bool = True) -> list:
        assert raise_on_error is False
        return self.replies


class Client:
    def __init__(self, replies: list) -> None:
        self.replies = replies

    def pipeline(self, transaction: bool = True) -> Pipeline:
        return Pipeline(self.replies)


def _transport() -> RedisTransport:
    return RedisTransport(Endpoint.from_url("redis://127.0.0.1:1"), 20, 200)


@pytest.mark.parametrize(("error", "raised"), [
    (redis.TimeoutError("Timeout reading from socket"), CacheTimeoutError),
    (redis.ConnectionError("Connection refused"), CacheConnectionError)])
def test_an_exchange_error_among_the_replies_is_raised_as_the_caches(error, raised):
    with pytest.raises(raised):
        _transport()._pipeline(Client([[b"v"], error]), [("HMGET", "k", 1), ("HMGET", "c", 0)])


def test_error_replies_stay_in_place():
    wrongtype = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    replies = _transport()._pipeline(Client([[b"v"], wrongtype]), [("HMGET", "k", 1)] * 2)
    assert replies == [[b"v"], wrongtype]


def test_a_closed_transport_never_connects_again():
    """The client's close() waits 5 s for its background thread; one still busy afterwards (a
    slow table load, a seed that does not answer) must not open connections nobody closes."""
    transport = _transport()
    transport.refresh()  # builds the clients (redis-py connects lazily)
    transport.close()
    with pytest.raises(CacheConnectionError, match="closed"):
        transport.refresh()
    with pytest.raises(CacheConnectionError, match="not connected"):
        transport.lookup("1", [("HMGET", "k", 1)])
