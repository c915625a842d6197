"""``kai-scheduler simulate``: the cluster file format, cycles with feedback, scenario files, errors."""

import json
from pathlib import Path

import pytest

from kai.cli import main
from kai.common.errors import ConfigError
from kai.sim.cluster_fields import parse_quantity

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
FRACTIONAL = str(ROOT / "examples" / "fractional-inference.yaml")


def simulate_json(capsys, *args):
    assert main(["simulate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def by_pod(items):
    return {i["pod"]: i for i in items}


def test_quickstart_places_what_fits(capsys):
    report = simulate_json(capsys, QUICKSTART, "--cycles", "1")
    (run,) = report["runs"]
    assert run["actions"] == ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction", "runtimelimit"]
    assert run["problems"] == []
    (cycle,) = run["cycles"]
    placed = by_pod(cycle["placements"])
    # The gang of four 4-GPU pods is placed as a whole, at most two pods per 8-GPU node.
    gang = [placed[f"resnet-train-{k}"] for k in range(4)]
    assert all(p["kind"] == "bound" and p["node"].startswith("gpu-node-") for p in gang)
    assert max(sum(p["node"] == n for p in gang) for n in {p["node"] for p in gang}) <= 2
    # The elastic job already runs one pod on gpu-node-2 and grows to all four.
    assert "llm-finetune-0" not in placed
    assert {placed[f"llm-finetune-{k}"]["kind"] for k in (1, 2, 3)} == {"bound"}
    assert placed["chat-inference-0"]["node"].startswith("gpu-node-")
    # The CPU-only job honours its node selector.
    assert placed["data-prep-0"]["node"] == placed["data-prep-1"]["node"] == "cpu-node"
    assert cycle["already_running"] == 1
    # The 16-GPU pod fits no 8-GPU node and says so.
    (pending,) = cycle["pending"]
    assert pending["pod"] == "giant-model-0" and pending["queue"] == "vision"
    largest = "Max GPU resources available in a single node in the default node-pool is topped at 8"
    assert largest in pending["job_reason"] and largest in pending["pod_reason"]


def test_quickstart_text_output(capsys):
    assert main(["simulate", QUICKSTART]) == 0
    out = capsys.readouterr().out
    assert "cycle 1:" in out and "cycle 2:" in out  # the file asks for two cycles
    assert "bound     data-prep-0 -> cpu-node" in out
    assert "pending   giant-model-0 (job giant-model, queue vision):" in out


def test_fractional_inference_example_shares_gpus_and_partitions_mig(capsys):
    (run,) = simulate_json(capsys, FRACTIONAL)["runs"]
    first, second = run["cycles"]
    placed = by_pod(first["placements"])
    assert all(p["kind"] == "bound" for p in placed.values())
    # Whole GPUs carry no device group; each shared pod names its devices.
    assert placed["llm-70b-0"]["gpu_groups"] == []
    chat = [placed[f"chat-small-{k}"] for k in range(4)]
    assert all(len(p["gpu_groups"]) == 1 for p in chat)
    # A quarter each: at most four pods on one device, and the four fill whole devices.
    devices = {(p["node"], p["gpu_groups"][0]) for p in chat}
    assert all(sum((p["node"], p["gpu_groups"][0]) == d for p in chat) <= 4 for d in devices)
    assert placed["embeddings-0"]["gpu_groups"] == placed["embeddings-1"]["gpu_groups"]
    reranker = placed["reranker-0"]["gpu_groups"]
    assert len(set(reranker)) == 2
    assert {placed[f"tokenizer-mig-{k}"]["node"] for k in range(3)} == {"a100-mig"}
    assert all(p["node"] != "a100-mig" for name, p in placed.items() if not name.startswith("tokenizer-mig"))
    # The malformed request is reported and waits with the field named; nothing moves in cycle 2.
    assert any("bad-fraction-0" in p and "gpu-fraction" in p for p in run["problems"])
    (pending,) = first["pending"]
    assert pending["pod"] == "bad-fraction-0" and "gpu-fraction='1.5'" in pending["job_reason"]
    assert second["placements"] == [] and second["already_running"] == 11


def test_fractional_inference_text_names_shared_devices(capsys):
    assert main(["simulate", FRACTIONAL, "--cycles", "1"]) == 0
    out = capsys.readouterr().out
    assert "bound     llm-70b-0 -> a100-0\n" in out
    assert "(shared GPU " in out


def test_cycles_feed_decisions_back(capsys):
    (run,) = simulate_json(capsys, QUICKSTART, "--cycles", "3")["runs"]
    first, second, third = run["cycles"]
    assert len(first["placements"]) == 10
    # Bound pods run in the next cycle: nothing is placed twice, the pending pod stays pending.
    assert second["placements"] == third["placements"] == []
    assert second["already_running"] == third["already_running"] == 11
    assert [p["pod"] for p in third["pending"]] == ["giant-model-0"]


def write(tmp_path, text, name="cluster.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_taints_priority_classes_and_quantities(tmp_path, capsys):
    path = write(tmp_path, """
nodes:
  - {name: tainted, gpus: 4, cpu: "4", memory: 8Gi, taints: ["dedicated=infer:NoSchedule"]}
queues:
  - {name: q, gpu: {deserved: 1}}
  - {name: no-quota}
workloads:
  - {name: serve, queue: q, priority: inference, gpus: 1, cpu: 500m, memory: 1Gi,
     tolerations: [{key: dedicated, value: infer}]}
  - {name: train, queue: q, gpus: 1}
  - {name: fat, queue: q, priority: build, cpu: 4100m, memory: 1Gi,
     tolerations: [{key: dedicated, operator: Exists}]}
  - {name: serve-over-quota, queue: no-quota, priority: inference, gpus: 1, tolerations: [{operator: Exists}]}
  - {name: serve-preemptible, queue: no-quota, priority: 125, preemptible: true, gpus: 1,
     tolerations: [{operator: Exists}]}
""")
    (cycle,) = simulate_json(capsys, path)["runs"][0]["cycles"]
    placed = by_pod(cycle["placements"])
    assert placed["serve-0"]["node"] == placed["serve-preemptible-0"]["node"] == "tainted"
    pending = by_pod(cycle["pending"])
    assert set(pending) == {"train-0", "fat-0", "serve-over-quota-0"}
    assert "untolerated taint" in pending["train-0"]["job_reason"]
    assert "topped at 4 cores" in pending["fat-0"]["job_reason"]  # 4.1 cores: more than any node has
    # inference (125) is not preemptible unless the workload says so: it may not exceed its quota.
    assert "Non-preemptible workload is over quota" in pending["serve-over-quota-0"]["job_reason"]


def test_unknown_queue_is_reported_as_a_problem(tmp_path, capsys):
    path = write(tmp_path, """
nodes: [{name: n, gpus: 1, cpu: "1", memory: 1Gi}]
queues: [{name: q}]
workloads: [{name: lost, queue: nowhere, gpus: 1}]
""")
    (run,) = simulate_json(capsys, path)["runs"]
    assert any("nowhere" in p for p in run["problems"])
    (pending,) = run["cycles"][0]["pending"]
    assert pending["pod"] == "lost-0" and "does not exist" in pending["job_reason"]


def test_conformance_format_is_simulated_per_scenario(tmp_path, capsys):
    path = write(tmp_path, """
- name: two-jobs
  actions: [allocate]
  mode: single_session
  config: {plugins: default}
  nodes: {node0: {gpus: 2}}
  queues: [{name: q0, deserved_gpus: 2}]
  jobs:
    - {name: small, queue: q0, gpus_per_task: 1, tasks: [{state: Pending}]}
    - {name: big, queue: q0, gpus_per_task: 4, tasks: [{state: Pending}]}
  expected: {}
- name: empty
  actions: [allocate]
  mode: single_session
  config: {plugins: default}
  nodes: {}
  queues: []
  jobs: []
  expected: {}
""", name="scenarios.yaml")
    runs = simulate_json(capsys, path, "--cycles", "2")["runs"]
    assert [r["name"] for r in runs] == ["two-jobs", "empty"]
    first, second = runs[0]["cycles"]
    assert first["placements"] == [
        {"pod": "small-0", "job": "small", "node": "node0", "kind": "bound", "gpu_groups": []}]
    assert [p["pod"] for p in first["pending"]] == ["big-0"]
    assert second["placements"] == [] and second["already_running"] == 1


@pytest.mark.parametrize("text, expected", [
    ('nodes: [{name: a, cpu: "4x", memory: 1Gi}]', ["nodes[0] 'a'", "field 'cpu'", "'4x'"]),
    ("nodes: [{cpu: '4', memory: 1Gi}]", ["nodes[0]", "field 'name'"]),
    ("workloads: [{name: w, queue: q, gpus: two}]", ["workloads[0] 'w'", "field 'gpus'", "whole number"]),
    ("workloads: [{name: w, queue: q, replicas: 2.5}]", ["workloads[0] 'w'", "field 'replicas'"]),
    ("workloads: [{name: w, queue: q, gpu: 1}]", ["workloads[0] 'w'", "field 'gpu' is not known", "'gpus'"]),
    ("workloads: [{name: w, queue: q, priority: urgent}]", ["workloads[0] 'w'", "field 'priority'", "urgent"]),
    ("workloads: [{name: w, queue: q, running_on: [ghost]}]", ["workloads[0] 'w'", "field 'running_on'", "ghost"]),
    ("queues: [{name: q, memory: {deserved: lots}}]", ["queues[0] 'q': memory", "field 'deserved'", "lots"]),
    ("nodes: {name: a}", ["field 'nodes' must be a list"]),
    ("nodes: [{name: a, cpu: '4', memory: 1Gi, mig_strategy: half}]", ["nodes[0] 'a'", "field 'mig_strategy'"]),
    ("workloads: [{name: w, queue: q, mig: {nvidia.com/mig-big: 1}}]", ["workloads[0] 'w'", "field 'mig'", "mig-big"]),
    ("workloads: [{name: w, queue: q, mig: {nvidia.com/mig-1g.5gb: -1}}]", ["workloads[0] 'w'", "whole number"]),
    ("nodes: [", ["not valid YAML"]),
    ("config: {actions: allocate, tiers: [{plugins: [{name: nosuch}]}]}", ["unknown plugin 'nosuch'"]),
])
def test_malformed_file_exits_2_naming_file_entry_and_field(tmp_path, capsys, text, expected):
    path = write(tmp_path, text)
    assert main(["simulate", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.startswith(f"kai-scheduler simulate: {path}: ")
    for part in expected:
        assert part in captured.err


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("value, base", [
    ("500m", 0.5), ("64", 64.0), (2, 2.0), ("1.5", 1.5), ("512Gi", 512 * 2**30), ("1k", 1000.0), ("1e3", 1000.0),
])
def test_parse_quantity(value, base):
    assert parse_quantity(value, "f", "cpu") == pytest.approx(base)


@pytest.mark.parametrize("value", ["4x", "", "Gi", True, None, "1.2.3"])
def test_parse_quantity_rejects(value):
    with pytest.raises(ConfigError, match="field 'cpu'"):
        parse_quantity(value, "f", "cpu")


def test_numa_example_pins_guaranteed_pods_and_keeps_their_zones_across_cycles(capsys):
    report = simulate_json(capsys, str(ROOT / "examples" / "numa-pinning.yaml"))
    first, second = report["runs"][0]["cycles"]
    placed = by_pod(first["placements"])
    assert {p: (placed[p]["node"], placed[p].get("numa_zones")) for p in placed} == {
        "pinned-0": ("big-zones", ["node-0"]), "pinned-1": ("big-zones", ["node-1"]),
        "shared-0": ("big-zones", None)}
    # Bound pods keep their zones: the third pinned pod still finds no zone in the next cycle.
    assert second["placements"] == [] and [p["pod"] for p in second["pending"]] == ["pinned-2"]


@pytest.mark.parametrize("numa, message", [
    ({"policy": "single-numa-node", "zones": []}, "numa: field 'zones' must list the node's NUMA zones (1 to 16)"),
    ({"policy": "strict", "zones": [{"name": "z", "cpu": "1"}]}, "field 'policy' must be one of"),
    ({"policy": "restricted", "zones": [{"name": "z", "cpu": "1"}, {"name": "z", "cpu": "1"}]}, "listed twice"),
    ({"policy": "restricted", "zones": [{"name": "z", "cpus": "1"}]}, "did you mean 'cpu'"),
])
def test_bad_numa_zones_in_a_cluster_file_are_errors_naming_the_field(tmp_path, capsys, numa, message):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"name": "n", "cpu": "4", "memory": "1Gi", "numa": numa}]}))
    assert main(["simulate", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_a_budget_paces_a_services_evictions_and_a_semi_preemptible_job_keeps_its_core(capsys):
    report = simulate_json(capsys, str(Path(QUICKSTART).with_name("disruption-budget.yaml")))
    evicted = [[e["pod"] for e in cycle["evictions"]] for cycle in report["runs"][0]["cycles"]]
    assert evicted == [["elastic-3"], ["elastic-2"], ["serve-3-0"], ["serve-2-0"]]
