"""Wheels without the network: SOLARIS's own, built from the checkout, and its base
dependencies repacked from the distributions installed in this interpreter.

The packaging test installs the base distribution into an empty virtualenv with
``pip install --no-index --find-links DIR``: DIR holds the wheel that ``pip wheel --no-deps
--no-build-isolation`` builds from the checkout and a wheel per base dependency repacked from
the files its installed ``RECORD`` lists (the same versions as this venv, byte for byte).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from solaris_lib.errors import SolarisError

# files pip writes at install time; a wheel never carries them
_INSTALL_ONLY = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def build_project_wheel(source: Path, out_dir: Path) -> Path:
    """``pip wheel`` of ``source`` into ``out_dir`` with this interpreter's setuptools, offline
    (``--no-index --no-deps --no-build-isolation``); returns the wheel's path. ``source/build``
    goes first: setuptools copies the package into ``build/lib`` and never deletes there, so a
    module moved or deleted since an earlier build would ship again."""
    shutil.rmtree(source / "build", ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-index", "--no-deps",
         "--no-build-isolation", "--wheel-dir", str(out_dir), str(source)],
        capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SolarisError(f"pip wheel {source} failed: {done.stderr[-2000:]}")
    wheels = sorted(out_dir.glob("solaris_precompute-*.whl"))
    if not wheels:
        raise SolarisError(f"pip wheel wrote no solaris_precompute wheel into {out_dir}")
    return wheels[-1]


def repack_installed(name: str, out_dir: Path) -> Path:
    """A wheel of the installed distribution ``name``, from the files its RECORD lists (scripts
    outside site-packages are left out: pip recreates them from entry_points.txt)."""
    dist = metadata.distribution(name)
    files = [f for f in dist.files or [] if not str(f).startswith("..")]
    info = next((f for f in files if f.name == "WHEEL" and f.parent.name.endswith(".dist-info")),
                None)
    if info is None:
        raise SolarisError(f"{name} was not installed from a wheel (no .dist-info/WHEEL)")
    tag = next(line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
               if line.startswith("Tag:"))
    stem = f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}"
    target = out_dir / f"{stem}-{tag}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel:
        for path in files:
            if path.parent.name.endswith(".dist-info") and path.name in _INSTALL_ONLY:
                continue
            located = Path(path.locate())
            if located.is_file():
                wheel.write(located, str(path))
        record = "\n".join(f"{p},," for p in wheel.namelist())
        wheel.writestr(f"{info.parent}/RECORD", f"{record}\n{info.parent}/RECORD,,\n")
    return target
