"""bench/knavigator.py without knavigator: the nodes of its workflows, the GPU occupancy, the skip without it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
try:
    import knavigator as bench
finally:
    sys.path.remove(str(ROOT / "bench"))

CONFIG_NODES = {
    "name": "config-nodes",
    "tasks": [{"id": "configure", "type": "Configure",
               "params": {"nodes": [{"type": "dgxa100.80g", "count": 3, "labels": {"nvidia.com/gpu.count": "8"}},
                                    {"type": "dgxh100.80g", "count": 1, "annotations": {"zone": 2},
                                     "conditions": [{"type": "Custom", "status": True, "reason": "R",
                                                     "message": "m"}]}],
                          "timeout": "5m"}}],
}


def test_the_nodes_of_a_configure_task_have_the_charts_shape():
    nodes = bench.configured_nodes(CONFIG_NODES)
    assert len(nodes) == 4
    a100, h100 = nodes[0], nodes[3]
    name = a100["metadata"]["name"]
    assert name.startswith("virtual-dgxa100.80g-") and len(name) == len("virtual-dgxa100.80g-") + 6
    assert len({n["metadata"]["name"] for n in nodes}) == 4
    assert a100["status"]["capacity"] == a100["status"]["allocatable"] == {
        "cpu": "256", "memory": "2Ti", "nvidia.com/gpu": "8", "nvidia.com/mlnxnics": "16",
        "ephemeral-storage": "30Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "pods": "110"}
    assert h100["status"]["capacity"]["cpu"] == "224"
    labels = a100["metadata"]["labels"]
    assert labels["type"] == "kwok" and labels["kubernetes.io/hostname"] == name
    assert labels["nvidia.com/gpu.count"] == "8" and labels["node-role.kubernetes.io/agent"] == ""
    assert a100["metadata"]["annotations"] == {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}
    assert h100["metadata"]["annotations"]["zone"] == "2"
    assert "spec" not in a100  # no taints: kwok manages every node
    conditions = {c["type"]: c["status"] for c in h100["status"]["conditions"]}
    assert conditions == {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
                          "Ready": "True", "Custom": "True"}


def test_node_names_are_the_same_every_run():
    names = [n["metadata"]["name"] for n in bench.configured_nodes(CONFIG_NODES)]
    assert names == [n["metadata"]["name"] for n in bench.configured_nodes(CONFIG_NODES)]


def test_what_only_knavigators_configure_task_does_is_refused():
    unknown_type = {"tasks": [{"id": "c", "type": "Configure", "params": {"nodes": [{"type": "cpu.x86", "count": 1}]}}]}
    with pytest.raises(ValueError, match="cpu.x86"):
        bench.configured_nodes(unknown_type)
    namespaces = {"tasks": [{"id": "c", "type": "Configure",
                             "params": {"namespaces": [{"name": "x", "op": "create"}]}}]}
    with pytest.raises(ValueError, match="namespaces"):
        bench.configured_nodes(namespaces)


def test_occupancy_counts_the_gpus_of_bound_unfinished_pods_up_to_each_nodes():
    capacity = {"a": 8, "b": 8}
    pods = [bench.PodView("1", "a", "Running", 8), bench.PodView("2", "a", "Pending", 8),
            bench.PodView("3", "b", "Running", 4), bench.PodView("4", "b", "Succeeded", 4),
            bench.PodView("5", "", "Pending", 8)]
    assert bench.occupancy(pods, capacity) == (8 + 4) / 16


def test_a_pods_gpus_come_from_its_requests_else_its_limits():
    two = {"nvidia.com/gpu": "2"}
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}},
                                   {"resources": {"requests": two, "limits": two}}, {}]}}
    assert bench.pod_gpus(pod) == 10


def test_without_knavigator_the_benchmark_is_skipped_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KNAVIGATOR_SOURCE", raising=False)
    assert bench.main(["--if-available", "--knavigator", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("knavigator's benchmarks skipped") and out.count("\n") == 1
