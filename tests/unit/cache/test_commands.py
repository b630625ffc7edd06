"""The publish options shared by ``solaris publish-cache`` and ``jobs/publish_cache.py``."""

import argparse

from solaris_lib.cache.commands import add_publish_arguments, publish_request

INTERVAL = ["--start", "2026-01-05T10:00", "--end", "2026-01-05T11:00"]


def _config(*extra: str):
    parser = argparse.ArgumentParser()
    add_publish_arguments(parser)
    return publish_request(parser.parse_args([*INTERVAL, *extra]))[1]


def test_direct_read_is_the_default_and_can_be_turned_off():
    assert _config().direct_read is True
    assert _config("--no-direct-read").direct_read is False
    assert _config("--no-direct-read", "--partitions", "3").partitions == 3
