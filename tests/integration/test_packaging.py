"""``pip install`` of the distribution into an empty virtualenv gives the lookup client and
nothing heavy: no pyspark, torch, pyarrow, pydantic or airflow. Offline: the wheel is built from
the checkout with this venv's setuptools and the base dependencies are repacked from this venv's
installed distributions (``solaris_lib.devtools.wheels``), then installed with ``--no-index``."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from solaris_lib.devtools.wheels import build_project_wheel, repack_installed

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BASE = ("numpy", "redis", "hiredis")
HEAVY = ("pyspark", "torch", "pyarrow", "pydantic", "apache-airflow", "faiss-cpu", "pandas")
PROBE = r"""
import json
from importlib import metadata
from solaris_lib.client import InMemoryRedis, MockTransport, SolarisClient

with SolarisClient.from_url("redis://unused", transport=MockTransport(InMemoryRedis()),
                            dim=4) as client:
    result = client.lookup(7, [1, 2, 3])
print(json.dumps({"hits": int(result.hit.sum()), "shape": list(result.embeddings.shape),
                  "installed": sorted(d.metadata["Name"].lower() for d in metadata.distributions())}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    built = build_project_wheel(ROOT, wheels)
    for name in BASE:
        repack_installed(name, wheels)
    return built


def requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(name).decode())
    return meta.get_all("Requires-Dist") or []


def test_base_install_is_the_lookup_client_alone(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-index", "--find-links", str(wheel.parent), "solaris-precompute"],
        capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    probe = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)  # not the checkout: the installed package
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["hits"] == 0 and found["shape"] == [3, 4]
    assert set(found["installed"]) == {"solaris-precompute", *BASE}
    site = next((venv / "lib").glob("python3.*/site-packages"))
    assert (site / "solaris_lib" / "py.typed").is_file()


def test_extras_split_batch_gpu_airflow_and_keep_developer_tools_out(wheel):
    required = requirements(wheel)
    base = [r for r in required if "extra ==" not in r]
    by_extra: dict[str, set[str]] = {}
    for line in required:
        if "extra ==" in line:
            spec, extra = line.split(";", 1)
            name = spec.strip().split("=")[0].split("<")[0].split(">")[0].split("[")[0]
            by_extra.setdefault(extra.split("==")[1].strip().strip("\"'"), set()).add(name.lower())
    assert {r.split(">")[0].split("=")[0].split("[")[0].lower() for r in base} == set(BASE)
    assert not any(h in by_extra.get(x, set()) for x in ("prometheus",) for h in HEAVY)
    assert {"pyspark", "torch", "pyarrow", "faiss-cpu"} <= by_extra["batch"]
    assert "faiss-gpu" in by_extra["gpu"] and "faiss-cpu" not in by_extra["gpu"]
    assert "faiss-gpu" not in by_extra["batch"]
    assert {"apache-airflow", "apache-airflow-providers-apache-spark"} <= by_extra["airflow"]
    every = set().union(*by_extra.values())
    assert not {"pytest", "ruff", "hypothesis", "pytest-xdist"} & every
