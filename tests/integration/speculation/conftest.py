"""Speculation modules cache mined frames (recent queries, unit item factors, features) that
outlive each test; the shared session would keep them all in its 2g heap (later modules then ran
out of memory), so every module's cached data is released when the module ends."""

import pytest


@pytest.fixture(scope="module", autouse=True)
def _release_spark_cache():
    yield
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.catalog.clearCache()
