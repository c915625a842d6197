"""A throwaway distribution as a wheel, installed with pip into a folder of its own, for testing plugins and
podgroupers installed with pip.

    site = install(wheel(tmp_path, "my-plugin", {"my_plugin.py": SOURCE}, "[kai.plugins]\\nmine = my_plugin:build\\n"),
                   tmp_path / "site")
    subprocess.run([sys.executable, "-m", "kai.cli", "plugins"], env=environment(site))

The wheel is written directly (a zip with its metadata and RECORD), so pip installs it offline
without a build step. It is never installed into the running interpreter's environment: a Python
started with :func:`environment` finds its modules and, through ``importlib.metadata``, its entry points.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Mapping
from pathlib import Path


def wheel(folder: Path, dist: str, modules: Mapping[str, str], entry_points: str, version: str = "0.0.1") -> str:
    """Write ``dist`` with ``modules`` (file name -> source, dedented) and ``entry_points`` (the text of
    ``entry_points.txt``) as a pure-Python wheel in ``folder``; returns its path."""
    stem = f"{dist.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {name: textwrap.dedent(text) for name, text in modules.items()}
    files.update({
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kai-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": entry_points,
    })
    record = [f"{name},sha256={_digest(text)},{len(text.encode())}" for name, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    path = Path(folder) / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return str(path)


def install(wheel_path: str, target: Path) -> Path:
    """``pip install`` the wheel (offline, without dependencies) into the folder ``target``; returns it."""
    result = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "install",
                             "--no-deps", "--no-index", "--target", str(target), wheel_path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return target


def environment(site: Path) -> dict[str, str]:
    """This process's environment with ``site`` first on ``PYTHONPATH``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))}


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
