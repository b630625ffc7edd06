"""The client's public surface: pinned names, the exception tree, options checked up front."""

import inspect
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import solaris_lib.client as client_module
from solaris_lib.cache.errors import CacheError
from solaris_lib.client import (
    CacheConfigError,
    CacheConnectionError,
    CacheTimeoutError,
    CacheUnavailableError,
    ClientOptions,
    LookupResult,
    SolarisClient,
)
from solaris_lib.errors import ConfigError, SolarisError


def test_public_names_are_pinned():
    assert client_module.__all__ == [
        "Backoff", "CacheConfigError", "CacheConnectionError", "CacheError", "CacheFormatError",
        "CacheProtocolError", "CacheTimeoutError", "CacheUnavailableError", "CircuitBreaker",
        "ClientOptions", "ClientStats", "InMemoryRedis", "Level", "LookupResult",
        "MockTransport", "RedisTransport", "SolarisClient", "Transport",
    ]
    root = Path(client_module.__file__).resolve().parents[1]
    assert (root / "py.typed").exists()  # PEP 561: the package ships its type hints


def test_exception_tree():
    assert issubclass(CacheError, SolarisError)
    assert issubclass(CacheTimeoutError, CacheUnavailableError)
    assert issubclass(CacheConnectionError, CacheUnavailableError)
    assert issubclass(CacheConfigError, ConfigError) and issubclass(CacheConfigError, CacheError)


def test_lookup_and_from_url_signatures():
    assert list(inspect.signature(SolarisClient.lookup).parameters) == ["self", "user_id",
                                                                         "item_ids"]
    parameters = inspect.signature(SolarisClient.from_url).parameters
    options = {f.name for f in fields(ClientOptions)} | {"transport"}
    assert set(parameters) == {"url"} | options
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in options)
    defaults = ClientOptions()
    for name in options - {"transport", "fallback", "dim"}:
        assert parameters[name].default == getattr(defaults, name), name
        assert parameters[name].annotation != inspect.Parameter.empty, name
    assert {"embeddings", "hit", "level", "version", "model_version", "error"} <= set(
        inspect.signature(LookupResult).parameters)


@pytest.mark.parametrize("options, problem", [
    (dict(timeout_ms=0), "timeout_ms"),
    (dict(miss_sample_rate=1.5), "miss_sample_rate"),
    (dict(dim=4, fallback=[1.0, 2.0]), "fallback"),
    (dict(key_prefix="a:b"), "prefix"),
])
def test_bad_options_are_refused_before_connecting(options, problem):
    with pytest.raises(CacheConfigError, match=problem):
        SolarisClient.from_url("redis://127.0.0.1:1/0", **options)


def test_unknown_options_are_a_type_error():
    with pytest.raises(TypeError):
        SolarisClient.from_url("redis://127.0.0.1:1/0", timeout=5)


def test_fallback_fixes_the_dimension():
    options = ClientOptions.build(fallback=np.array([1.0, 2.0, 3.0]))
    assert options.expected_dim == 3 and options.fallback == (1.0, 2.0, 3.0)
    assert options.fallback_vector.dtype == np.float32


def test_client_and_publisher_import_without_heavy_dependencies():
    code = ("import sys\n"
            "for name in ('pyspark', 'torch', 'faiss'):\n"
            "    sys.modules[name] = None\n"
            "import solaris_lib.client, solaris_lib.cache.publish, solaris_lib.cache.commands\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
