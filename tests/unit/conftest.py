"""Unit tests see the suite's own SOLARIS_* settings only.

An integration session fixture (the shared pipeline) points every later job of its xdist
worker at its world through SOLARIS_* variables; a unit module that the scheduler sends to that
worker afterwards must not read them (a DAG parsed under the pipeline's key prefix names its
asset after it)."""

from __future__ import annotations

import os

import pytest

# what tests/conftest.py and the caller's environment set, before any fixture ran
_SUITE = {key: value for key, value in os.environ.items() if key.startswith("SOLARIS_")}


@pytest.fixture(scope="module", autouse=True)
def _suite_settings_only():
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("SOLARIS_") and k not in _SUITE]:
            patch.delenv(key)
        for key, value in _SUITE.items():
            patch.setenv(key, value)
        yield
