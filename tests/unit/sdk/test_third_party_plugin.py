"""A plugin from another distribution: installed with pip (into a folder of its own, on the ``PYTHONPATH`` of the
processes that use it), listed, configured, changes a placement."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.wheel import environment, install, wheel

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


SESSION = '''
import sys
from kai import testing as kt

plugins = ["predicates", "nodeplacement"] + sys.argv[1:]
snap = kt.cluster(nodes=[kt.node("a1", gpus=2, labels={"zone": "a"}), kt.node("b1", gpus=8, labels={"zone": "b"})],
                  jobs=[kt.job("train", queue="q", gpus=1)])
print(kt.placements(kt.run(snap, plugins=plugins))["train-0"])
'''


@pytest.fixture
def site(tmp_path):
    """The plugin's distribution, installed with pip into a folder of its own."""
    return install(wheel(tmp_path, DIST, {f"{MODULE}.py": PLUGIN}, ENTRY_POINTS), tmp_path / "site")


# ``-P``: the working directory (the source tree) must not shadow the installed package.
def _kai(site, *args):
    return subprocess.run([sys.executable, "-P", "-c", "import sys; from kai.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=120, env=environment(site))


def _place(site, *plugins):
    result = subprocess.run([sys.executable, "-P", "-c", SESSION, *plugins],
                            capture_output=True, text=True, timeout=120, env=environment(site))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_third_party_plugin_is_listed_and_changes_a_placement(site):
    listing = _kai(site, "plugins")
    assert listing.returncode == 0, listing.stderr
    line = next(x for x in listing.stdout.splitlines() if x.split()[:1] == ["zoneb"])
    assert f"{DIST} 0.0.1" in line and f"{MODULE}:build" in line
    # Bin-packing alone puts the task on the fuller node a1; the plugin's score outweighs that.
    assert _place(site) == "a1"
    assert _place(site, "zoneb") == "b1"
