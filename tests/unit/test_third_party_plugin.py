"""A plugin from another distribution: installed with pip, listed, configured, changes a placement."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import textwrap
import zipfile

import pytest

DIST = "kai-zone-b-test-plugin"
MODULE = "kai_zone_b_test_plugin"

PLUGIN = '''
"""Prefers nodes labelled zone=b, strongly."""

from kai import hookimpl


class ZoneB:
    def __init__(self, weight):
        self.weight = weight

    @hookimpl
    def kai_node_scores(self, task, nodes):
        return [self.weight if n.labels.get("zone") == "b" else 0.0 for n in nodes]


def build(arguments):
    return ZoneB(float(arguments.get("weight", 1000)))
'''

ENTRY_POINTS = f"""[kai.plugins]
zoneb = {MODULE}:build
"""


def build_wheel(folder) -> str:
    """Write the distribution as a wheel (a zip with its metadata), so pip installs it offline with no build step."""
    stem = f"{DIST.replace('-', '_')}-0.0.1"
    info = f"{stem}.dist-info"
    files = {
        f"{MODULE}.py": textwrap.dedent(PLUGIN),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kai-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": ENTRY_POINTS,
    }
    record = [f"{name},sha256={_digest(text)},{len(text.encode())}" for name, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return str(path)


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


SESSION = '''
import sys
from kai import testing as kt

plugins = ["predicates", "nodeplacement"] + sys.argv[1:]
snap = kt.cluster(nodes=[kt.node("a1", gpus=2, labels={"zone": "a"}), kt.node("b1", gpus=8, labels={"zone": "b"})],
                  jobs=[kt.job("train", queue="q", gpus=1)])
print(kt.placements(kt.run(snap, plugins=plugins))["train-0"])
'''


def _pip(*args):
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def installed(tmp_path):
    result = _pip("install", "--no-deps", "--no-index", build_wheel(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        yield
    finally:
        _pip("uninstall", "-y", DIST)


# ``-P``: the working directory (the source tree) must not shadow the installed package.
def _kai(*args):
    return subprocess.run([sys.executable, "-P", "-c", "import sys; from kai.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=120)


def _place(*plugins):
    result = subprocess.run([sys.executable, "-P", "-c", SESSION, *plugins],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_third_party_plugin_is_listed_and_changes_a_placement(installed):
    listing = _kai("plugins")
    assert listing.returncode == 0, listing.stderr
    line = next(x for x in listing.stdout.splitlines() if x.split()[:1] == ["zoneb"])
    assert f"{DIST} 0.0.1" in line and f"{MODULE}:build" in line
    # Bin-packing alone puts the task on the fuller node a1; the plugin's score outweighs that.
    assert _place() == "a1"
    assert _place("zoneb") == "b1"
