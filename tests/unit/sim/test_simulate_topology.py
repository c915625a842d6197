"""``kai-scheduler simulate`` with topologies, topology constraints and pod-set trees in the cluster file."""

import json
from pathlib import Path

import pytest
import yaml

from kai.cli import main
from kai.common.errors import ConfigError
from kai.sim.cluster_file import parse_cluster

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "topology-training.yaml"
RACK, ZONE = "network.example.com/rack", "topology.kubernetes.io/zone"


def test_the_topology_example_places_each_group_inside_its_domain(capsys):
    assert main(["simulate", str(EXAMPLE), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["problems"] == []
    (cycle,) = run["cycles"]
    placed = {p["pod"]: p["node"] for p in cycle["placements"]}
    labels = {n.name: n.labels for n in parse_cluster(yaml.safe_load(EXAMPLE.read_text()), "f", 0.0).nodes}

    def racks(prefix):
        return {labels[n].get(RACK) for p, n in placed.items() if p.startswith(prefix)}

    # The service's prefill and decode workers (2 of 4 each at least) share one rack; its frontend is free.
    assert sum(p.startswith("llm-serve-prefill") for p in placed) >= 2
    assert sum(p.startswith("llm-serve-decode") for p in placed) >= 2
    assert len(racks("llm-serve-prefill") | racks("llm-serve-decode")) == 1
    assert placed["llm-serve-frontend-0"] == "cpu-node"
    assert len(racks("finetune")) == 1 and sum(p.startswith("finetune") for p in placed) == 2
    assert len({labels[placed[f"pretrain-{k}"]][ZONE] for k in (0, 1)}) == 1
    (pending,) = cycle["pending"]
    assert pending["pod"] == "typo-0"
    assert "does not contain a level with this name" in pending["job_reason"]


def parse(text: str):
    return parse_cluster(yaml.safe_load(text), "c.yaml", 0.0)


BASE = """
topologies: [{name: dc, levels: [zone, rack]}]
nodes: [{name: n, cpu: "8", memory: 8Gi, gpus: 2, labels: {zone: z, rack: r}}]
queues: [{name: q}]
"""


def test_pod_sets_subgroups_and_constraints_are_read():
    cluster = parse(BASE + """
workloads:
  - name: svc
    queue: q
    gpus: 1
    topology: {topology: dc, preferred_level: zone}
    subgroups:
      - {name: model, topology: {topology: dc, required_level: rack}}
    pod_sets:
      - {name: fe, gpus: 0}
      - {name: prefill, parent: model, replicas: 3, min_available: 2, running_on: [n]}
""")
    (job,) = cluster.jobs
    assert job.topology.preferred_level == "zone" and job.topology.required_level is None
    assert job.subgroups["model"].topology.required_level == "rack"
    assert {n: (ps.min_available, ps.parent) for n, ps in job.pod_sets.items()} == {
        "fe": (1, None), "prefill": (2, "model")}
    tasks = job.tasks
    assert sorted(tasks) == ["svc-fe-0", "svc-prefill-0", "svc-prefill-1", "svc-prefill-2"]
    assert tasks["svc-fe-0"].request.gpus == 0 and tasks["svc-prefill-1"].request.gpus == 1
    assert tasks["svc-prefill-0"].node == "n" and tasks["svc-prefill-0"].pod_set == "prefill"
    assert [t.name for t in cluster.topologies] == ["dc"]
    assert cluster.snapshot(0.0).topologies["dc"].levels == ("zone", "rack")


@pytest.mark.parametrize("workload, error", [
    ("{name: w, queue: q, topology: {topology: dc}}", "give 'required_level', 'preferred_level' or both"),
    ("{name: w, queue: q, topology: {topology: dc, required: rack}}", "field 'required' is not known"),
    ("{name: w, queue: q, replicas: 2, pod_sets: [{name: a}]}", "field 'replicas' belongs in each of 'pod_sets'"),
    ("{name: w, queue: q, pod_sets: [{name: a, parent: x}]}", "field 'parent' names unknown subgroup 'x'"),
    ("{name: w, queue: q, pod_sets: [{name: a}, {name: a}]}", "name 'a' is used twice"),
    ("{name: w, queue: q, subgroups: [{name: s}]}", "field 'subgroups' needs 'pod_sets'"),
    ("{name: w, queue: q, subgroups: [{name: s, parent: t}, {name: t}], pod_sets: [{name: a, parent: s}]}",
     "names 't', which is not a subgroup listed before it"),
])
def test_bad_trees_and_constraints_are_errors_naming_the_entry(workload, error):
    with pytest.raises(ConfigError) as exc:
        parse(BASE + f"workloads: [{workload}]\n")
    assert error in str(exc.value) and "workloads[0] 'w'" in str(exc.value)


def test_a_topology_breaking_the_crd_rules_is_an_error():
    with pytest.raises(ConfigError, match=r"topologies\[0\] 'dc': level 'rack' is listed twice"):
        parse("topologies: [{name: dc, levels: [rack, rack]}]\n")

