"""``kai-scheduler simulate`` with DRA: device classes, node devices and claims in a cluster file, the example with
a DRA pool and a fractional pool, claims held across cycles, and file errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai import testing as kt
from kai.cli import main
from kai.common.errors import ConfigError
from kai.sim.cluster_file import parse_cluster

ROOT = Path(__file__).resolve().parents[2].parent
EXAMPLE = str(ROOT / "examples" / "dra-gpus.yaml")


def test_the_example_places_dra_claims_implicit_claims_and_fractions_on_their_pools(capsys):
    assert main(["simulate", EXAMPLE, "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    first, second = run["cycles"]
    placed = {p["pod"]: p["node"] for p in first["placements"]}
    gang = {placed[f"pretrain-{k}"] for k in range(4)}
    assert len(gang) == 1 and gang <= {"dra-0", "dra-1"}  # four pods of two H100 each fill one node
    assert {placed[f"eval-{k}"] for k in range(3)} | {placed["legacy-0"]} <= {"dra-0", "dra-1"}
    assert {placed[f"chat-{k}"] for k in range(4)} | {placed["embeddings-0"]} <= {"a100-0", "a100-1"}
    (pending,) = first["pending"]
    assert pending["pod"] == "b200-only-0"
    assert "claim default/b200-only-0-gpu request devices: no device of class gpu.nvidia.com" in pending["pod_reason"]
    assert second["placements"] == [] and second["already_running"] == 14


def test_claims_are_allocated_once_and_held_in_later_cycles():
    data = {
        "cycles": 2,
        "device_classes": [{"name": "gpu.example.com", "selectors": ['device.driver == "gpu.example.com"']}],
        "nodes": [{"name": "n", "cpu": "8", "memory": "8Gi",
                   "devices": [{"driver": "gpu.example.com", "count": 2, "attributes": {"model": "A"}},
                               {"driver": "gpu.example.com", "count": 1, "attributes": {"model": "B"}}]}],
        "queues": [{"name": "q"}],
        "workloads": [
            {"name": "shared", "queue": "q", "replicas": 2, "cpu": "1",
             "claims": [{"name": "gpu", "device_class": "gpu.example.com", "shared": True}]},
            {"name": "bs", "queue": "q", "cpu": "1",
             "claims": [{"name": "gpu", "device_class": "gpu.example.com",
                         "selectors": ['device.attributes["gpu.example.com"].model == "B"']}]},
        ],
    }
    cluster = parse_cluster(data, "f.yaml", 1000.0)
    assert [d.name for s in cluster.slices for d in s.devices] == ["gpu-0", "gpu-1", "gpu-2"]
    assert sorted(c.name for c in cluster.claims) == ["bs-0-gpu", "shared-gpu"]
    tasks = {t.name: t for j in cluster.jobs for t in j.tasks.values()}
    assert tasks["shared-0"].request.dra_gpus == 1 and tasks["bs-0"].resource_claims[0].claim == "bs-0-gpu"
    session = kt.run(cluster.snapshot(1000.0), list(cluster.config.plugins), ("allocate",))
    assert set(kt.placements(session)) == {"shared-0", "shared-1", "bs-0"}
    for task in tasks.values():  # as the simulator settles them
        task.status = task.status.RUNNING
    later = cluster.snapshot(1060.0).dra.claims
    assert later["default/shared-gpu"].reserved_for == ("default/shared-0", "default/shared-1")
    assert [d for _, d in later["default/bs-0-gpu"].allocation.devices] == [("gpu.example.com", "n", "gpu-2")]


@pytest.mark.parametrize(("change", "message"), [
    ({"claims": [{"name": "gpu", "device_class": "nope"}]}, r"claims\[0\] 'gpu': field 'device_class' names unknown"),
    ({"claims": [{"name": "gpu", "device_class": "c", "all": True, "count": 2}]}, "'all' and 'count' exclude"),
    ({"claims": [{"name": "gpu", "device_class": "c"}], "running_on": "n"}, "cannot be 'running_on'"),
    ({"claims": [{"name": "gpu", "device_class": "c", "cout": 2}]}, "did you mean 'count'"),
])
def test_a_malformed_claim_is_an_error_naming_the_field(change, message):
    data = {"device_classes": [{"name": "c"}], "nodes": [{"name": "n", "cpu": "1", "memory": "1Gi"}],
            "queues": [{"name": "q"}], "workloads": [{"name": "w", "queue": "q", **change}]}
    with pytest.raises(ConfigError, match=message):
        parse_cluster(data, "f.yaml", 0.0)
