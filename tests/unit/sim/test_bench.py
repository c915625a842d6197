"""``kai-scheduler bench``: JSON shape, skipped scenarios, folders, errors."""

import json
from pathlib import Path

from kai.cli import main
from kai.sim import scenario

ROOT = Path(__file__).resolve().parents[3]
SMALL = str(ROOT / "bench" / "topologies" / "BenchmarkAllocateAction_SmallCluster.yaml")
RECLAIM = str(ROOT / "bench" / "topologies" / "BenchmarkReclaimAction_SmallCluster.yaml")
KEYS = {"file", "name", "median_s", "min_s", "cpu_median_s", "repeats", "skipped"}

TINY = """
- name: tiny
  actions: [allocate]
  mode: single_session
  config: {plugins: default}
  nodes: {node0: {gpus: 2}}
  queues: [{name: q0, deserved_gpus: 2}]
  jobs: [{name: j, queue: q0, gpus_per_task: 1, tasks: [{state: Pending}, {state: Pending}]}]
  expected: {}
"""


def bench_json(capsys, *args):
    assert main(["bench", *args, "--json"]) == 0
    captured = capsys.readouterr()
    assert "native modules:" in captured.err
    return json.loads(captured.out)


def test_json_shape(capsys):
    (entry,) = bench_json(capsys, SMALL, "--repeat", "3")
    assert set(entry) == KEYS
    assert entry["file"] == SMALL and entry["name"] == "BenchmarkAllocateAction_SmallCluster"
    assert entry["repeats"] == 3 and entry["skipped"] is None
    assert 0 < entry["min_s"] <= entry["median_s"]
    assert 0 < entry["cpu_median_s"]


def test_unbuilt_plugin_is_skipped_and_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(scenario, "KAI_DEFAULT_PLUGINS", (*scenario.KAI_DEFAULT_PLUGINS, "notyet"))
    (tmp_path / "snap.yaml").write_text(TINY.replace("{plugins: default}", "{plugins: [{name: notyet}]}"))
    (entry,) = bench_json(capsys, str(tmp_path / "snap.yaml"), "--repeat", "1")
    assert "plugin notyet" in entry["skipped"]
    assert entry["median_s"] is None and entry["min_s"] is None and entry["repeats"] == 0
    assert entry["cpu_median_s"] is None


def test_reclaim_benchmark_runs(capsys):
    (entry,) = bench_json(capsys, RECLAIM, "--repeat", "1")
    assert entry["skipped"] is None and entry["median_s"] > 0


def test_folder_and_text_output(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(TINY)
    assert main(["bench", str(tmp_path), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "a.yaml tiny: median" in out and "over 2 runs" in out
    assert "native modules:" in out


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["bench", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {name: x, mode: single_session}")
    assert main(["bench", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "field 'actions'" in err and "Traceback" not in err
