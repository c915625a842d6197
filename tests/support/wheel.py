"""A throwaway distribution as a wheel, for testing plugins and podgroupers installed with pip.

    path = wheel(tmp_path, "my-plugin", {"my_plugin.py": SOURCE}, "[kai.plugins]\\nmine = my_plugin:build\\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", path])

The wheel is written directly (a zip with its metadata and RECORD), so pip installs it offline
without a build step.
"""

from __future__ import annotations

import base64
import hashlib
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


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
