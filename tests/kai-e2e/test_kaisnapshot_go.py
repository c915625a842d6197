"""Snapshots made by KAI's own Go code load here and decide the same: each fixture of
``tests/unit/sim/kai_snapshots`` is read into KAI's types, its objects listed by KAI's scheduler cache and
served by KAI's ``snapshot`` plugin (built from KAI's source at the pinned commit with ``go/snapshot_export_test.go``
added to the plugin's package), and the zip it serves is replayed beside the fixture. Needs Go; the test binary
is built once into the KAI e2e cache (the first build downloads KAI's modules and takes minutes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from kaisource import KAI_COMMIT, cache_dir, kai_source

from kai.dev.gobuild import go_environment
from kai.scheduler.kaisnapshot import POOL_FIELDS, KaiSnapshot, read_snapshot, scheduler_config
from kai.sim.kaisnapshot import replay

HERE = Path(__file__).resolve().parent
FIXTURES = sorted((HERE.parent / "unit" / "sim" / "kai_snapshots").iterdir())
PACKAGE = "pkg/scheduler/plugins/snapshot"
ADDED = HERE / "go" / "snapshot_export_test.go"

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain to build KAI's plugin")


@pytest.fixture(scope="module")
def exporter() -> Path:
    """KAI's snapshot plugin package, with the exporting test added, compiled (cached per commit)."""
    root = cache_dir()
    target = root / "bin" / KAI_COMMIT / "snapshot-export.test"
    if os.access(target, os.X_OK) and target.stat().st_mtime >= ADDED.stat().st_mtime:
        return target
    source = kai_source(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kai-snapshot-") as tmp:
        overlay = Path(tmp) / "overlay.json"
        overlay.write_text(json.dumps({"Replace": {str(source / PACKAGE / "zz_export_test.go"): str(ADDED)}}))
        subprocess.run(["go", "test", "-c", f"-overlay={overlay}", "-o", str(target), f"./{PACKAGE}"],
                       cwd=source, env=go_environment(root), check=True, stdin=subprocess.DEVNULL)
    return target


def outcome(report: dict) -> tuple:
    """What a replay decided, independent of the order the objects were listed in."""
    cycle = report["cycles"][0]
    return (sorted((p["kind"], p["pod"], p["node"]) for p in cycle["placements"]),
            sorted((e["pod"], e["node"]) for e in cycle["evictions"]),
            sorted(p["pod"] for p in cycle["pending"]),
            sorted((p["pod"], p["outcome"], p["here"] or "", p["kai"] or "") for p in report["comparison"]["pods"]))


def listed(snapshot: KaiSnapshot) -> dict[str, int]:
    """How many objects of each kind KAI's plugin lists of the snapshot: of its node pool's kinds, the pool's."""
    partition = scheduler_config(snapshot).partition
    return {k: sum(1 for o in v if k not in POOL_FIELDS or partition.matches(o["metadata"].get("labels") or {}))
            for k, v in snapshot.objects.items()}


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_a_snapshot_served_by_kais_plugin_replays_as_the_fixture_it_was_made_from(exporter, fixture, tmp_path):
    served = tmp_path / "snapshot.zip"
    subprocess.run([str(exporter), "-test.run", "^TestExportSnapshot$"], check=True, capture_output=True,
                   env={**os.environ, "SNAPSHOT_IN": str(fixture), "SNAPSHOT_OUT": str(served)})
    kai = read_snapshot(served)
    ours = read_snapshot(fixture)
    assert {k: len(v) for k, v in kai.objects.items()} == listed(ours)
    assert outcome(replay(kai, "kai", compare=True)) == outcome(replay(ours, "ours", compare=True))
