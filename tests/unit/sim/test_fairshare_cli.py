"""``kai-scheduler fairshare``: per queue and resource the division's result and the rule that bounded it."""

import json
from pathlib import Path

from kai.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "examples" / "fairshare.yaml")
SCENARIO = str(ROOT / "tests" / "conformance" / "kai" / "reclaim__reclaim.yaml")


def report(capsys, path):
    assert main(["fairshare", path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_example_bounds_each_queue_by_a_different_rule(capsys):
    (run,) = report(capsys, EXAMPLE)["runs"]
    assert run["totals"]["gpu"] == 16 and run["totals"]["cpu"] == 128_000 and run["problems"] == []
    gpu = {q["name"]: q["resources"]["gpu"] for q in run["queues"]}
    columns = ("deserved", "fair_share", "allocated", "requested", "limit")
    assert {n: tuple(g[c] for c in columns) for n, g in gpu.items()} == {
        "production": (2, 5, 0, 5, -1), "research": (2, 6, 0, 10, -1), "interns": (1, 3, 0, 6, 3),
        "batch": (2, 2, 1, 6, -1),
    }
    assert {n: g["bounded_by"] for n, g in gpu.items()} == {
        "production": "requested (got all it asked)", "research": "higher-priority sibling took the rest",
        "interns": "limit", "batch": "deserved only: over-quota weight 0",
    }
    assert sum(g["fair_share"] for g in gpu.values()) == 16


def test_tree_order_and_text_table(capsys, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""
nodes: [{name: n, gpus: 4, cpu: "8", memory: 32Gi}]
queues:
  - {name: dept, gpu: {deserved: 4}}
  - {name: team-b, parent: dept, gpu: {deserved: 3}}
  - {name: team-a, parent: dept, gpu: {deserved: 3}}
  - {name: bad, parent: dept, gpu: {deserved: 1, limit: 0}}
workloads:
  - {name: a, queue: team-a, replicas: 4, gpus: 1, cpu: "1", memory: 1Gi}
  - {name: b, queue: team-b, replicas: 4, gpus: 1, cpu: "1", memory: 1Gi}
""")
    (run,) = report(capsys, str(path))["runs"]
    assert [(q["name"], q["depth"]) for q in run["queues"]] == [("dept", 0), ("team-b", 1), ("team-a", 1)]
    assert run["problems"] == ["queue bad: gpu limit 0 is below its deserved quota 1"]
    gpu = {q["name"]: q["resources"]["gpu"] for q in run["queues"]}
    # dept's 4 GPUs do not cover its children's deserved 3 + 3: each keeps its quota, nothing more.
    assert (gpu["team-b"]["fair_share"], gpu["team-a"]["fair_share"]) == (3, 3)
    assert gpu["team-b"]["bounded_by"] == gpu["team-a"]["bounded_by"] == "deserved only: parent exhausted"
    assert main(["fairshare", str(path)]) == 0
    text = capsys.readouterr().out
    assert "problem: queue bad: gpu limit 0 is below its deserved quota 1" in text
    assert "\n    team-b" in text and "GPU (GPUs; cluster total 4" in text and "Memory (GB;" in text


def test_conformance_scenario_file(capsys):
    runs = report(capsys, SCENARIO)["runs"]
    assert len(runs) > 1
    for run in runs:
        for q in run["queues"]:
            for row in q["resources"].values():
                assert row["bounded_by"]


def test_configuration_without_proportion_is_an_error(capsys, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("config: {tiers: [{plugins: [{name: predicates}]}]}\nnodes: []\n")
    assert main(["fairshare", str(path)]) == 2
    assert "does not run the proportion plugin" in capsys.readouterr().err


def test_docs_show_the_examples_real_output(capsys):
    assert main(["fairshare", EXAMPLE]) == 0
    gpu_table = capsys.readouterr().out.split("\n\n")[1]
    assert gpu_table in (ROOT / "docs" / "fairshare.md").read_text()


def test_historical_usage_is_shown_when_a_usage_source_has_data(capsys, tmp_path, monkeypatch):
    class Heavy:
        """A usage source that says queue a used 60% of the GPUs."""

        def usage(self, now):
            return {"a": (0.0, 0.0, 0.6)}

        def close(self):
            pass

    monkeypatch.setattr("kai.sim.fairshare.make_usage_source", lambda config: Heavy() if config else None)
    path = tmp_path / "c.yaml"
    path.write_text("""
config:
  usageDBConfig: {clientType: in-process}
nodes: [{name: n, gpus: 8, cpu: "8", memory: 32Gi}]
queues: [{name: a}, {name: b}]
workloads:
  - {name: ja, queue: a, replicas: 8, gpus: 1, cpu: "0", memory: "0"}
  - {name: jb, queue: b, replicas: 8, gpus: 1, cpu: "0", memory: "0"}
""")
    (run,) = report(capsys, str(path))["runs"]
    gpu = {q["name"]: q["resources"]["gpu"] for q in run["queues"]}
    assert gpu["a"]["usage"] == 0.6 and gpu["a"]["fair_share"] < gpu["b"]["fair_share"]
    assert gpu["a"]["bounded_by"] == "over-quota weight share, reduced by past usage"
    assert main(["fairshare", str(path)]) == 0
    text = capsys.readouterr().out
    assert " usage  bounded by" in text and "  60.0%  over-quota weight share, reduced by past usage" in text


def test_gpu_types_of_a_cluster_file_are_divided_and_explained_per_type(capsys, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""
nodes:
  - {name: a, count: 2, gpus: 4, cpu: "8", memory: 32Gi, labels: {nvidia.com/gpu.product: A100}}
  - {name: h, count: 1, gpus: 8, cpu: "8", memory: 32Gi, labels: {nvidia.com/gpu.product: H100}}
queues:
  - name: vision
    gpu: {deserved: 4}
    resource_types:
      - {name: a100, node_selector: {nvidia.com/gpu.product: A100}, gpu: {deserved: 2, limit: 6}}
  - name: speech
    gpu: {deserved: 4}
    resource_types:
      - {name: a100, node_selector: {nvidia.com/gpu.product: A100}, gpu: {deserved: 2}}
      - {name: h100, node_selector: {nvidia.com/gpu.product: H100}, gpu: {deserved: 2}}
  - {name: any, gpu: {deserved: 2}}
workloads:
  - {name: v, queue: vision, replicas: 8, gpus: 1, cpu: "1", memory: 1Gi}
  - {name: s, queue: speech, replicas: 8, gpus: 1, cpu: "1", memory: 1Gi}
""")
    (run,) = report(capsys, str(path))["runs"]
    types = {t["name"]: t for t in run["resource_types"]}
    assert (types["a100"]["gpus"], types["h100"]["gpus"]) == (8, 8)
    assert types["a100"]["node_selector"] == {"nvidia.com/gpu.product": "A100"}
    a100 = {q["name"]: q for q in types["a100"]["queues"]}
    assert set(a100) == {"vision", "speech"} and [q["name"] for q in types["h100"]["queues"]] == ["speech"]
    assert (a100["vision"]["fair_share"], a100["speech"]["fair_share"]) == (4, 4)
    assert (a100["vision"]["limit"], a100["speech"]["requested"]) == (6, 8)
    assert main(["fairshare", str(path)]) == 0
    text = capsys.readouterr().out
    assert "GPU type a100 (nodes nvidia.com/gpu.product=A100; 8 GPUs; - = unlimited)" in text
    assert "GPU type h100" in text
