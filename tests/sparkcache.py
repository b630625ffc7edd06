"""What a test can ask the shared SparkSession about its cache."""


def cached_frames(session) -> bool:
    """True when ``session`` holds any cached DataFrame (Spark's CacheManager is not empty)."""
    return not session._jsparkSession.sharedState().cacheManager().isEmpty()
