"""Fixtures shared with the cache's integration tests (private servers, settings)."""

from tests.integration.cache.conftest import private_redis, settings_for  # noqa: F401
