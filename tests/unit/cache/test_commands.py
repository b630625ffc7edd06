"""The publish options shared by ``solaris publish-cache`` and ``jobs/publish_cache.py``."""

import argparse

import pytest

from solaris_lib.cache.commands import add_publish_arguments, publish_request
from solaris_lib.errors import ConfigError

INTERVAL = ["--start", "2026-01-05T10:00", "--end", "2026-01-05T11:00"]


def _config(*extra: str):
    parser = argparse.ArgumentParser()
    add_publish_arguments(parser)
    return publish_request(parser.parse_args([*INTERVAL, *extra]))[1]


def test_defaults_and_the_bucket_count():
    assert (_config().buckets, _config().ttl_s, _config().force) == (4, None, False)
    assert _config("--buckets", "8", "--partitions", "3").buckets == 8
    assert _config("--partitions", "3").partitions == 3


@pytest.mark.parametrize("flags, field", [(("--buckets", "3"), "buckets"),
                                          (("--partitions", "0"), "partitions")])
def test_bad_values_are_config_errors_naming_the_field(flags, field):
    with pytest.raises(ConfigError, match=field):
        _config(*flags)
