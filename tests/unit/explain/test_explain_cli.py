"""``kai-scheduler explain`` offline and ``simulate --explain``: one dominant reason per pending PodGroup."""

import json
from pathlib import Path

import pytest

from kai.cli import main

CLUSTER = str(Path(__file__).with_name("pending.yaml"))


def answer(capsys, *args):
    assert main(["explain", *args, "--file", CLUSTER, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


NODES = """
topologies: [{name: dc, levels: [rack]}]
nodes:
  - {name: a, count: 2, gpus: 4, cpu: "32", memory: 128Gi, labels: {rack: r1}}
  - {name: b, gpus: 4, cpu: "32", memory: 128Gi, labels: {rack: r2}}
queues:
  - {name: team-a, gpu: {deserved: 4, limit: 6}}
  - {name: team-b, gpu: {deserved: 8}}
workloads:
"""
HELD = "  - {name: held, queue: team-a, gpus: 4, running_on: a-0}\n"
SERVING = "  - {name: serving, queue: team-b, priority: inference, gpus: 4, running_on: a-0}\n"


def case(capsys, tmp_path, workloads, target):
    path = tmp_path / "cluster.yaml"
    path.write_text(NODES + workloads)
    assert main(["explain", target, "--file", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def hints(answer):
    return [(w["text"], w["verified"]) for w in answer["reason"]["would_run_if"]]


def test_a_gang_over_its_queue_limit(capsys, tmp_path):
    a = case(capsys, tmp_path, HELD + "  - {name: gang, queue: team-a, replicas: 2, gpus: 2}\n", "default/gang")
    assert a["reason"]["code"] == "OverLimit"
    assert a["reason"]["details"] == {"kind": "queue-limit", "queue": "team-a", "resource": "gpu", "limit": 6.0,
                                      "allocated": 4.0, "requested": 4.0, "missing": 2.0}
    assert hints(a) == [("queue team-a's gpu limit is raised to 8", True),
                        ("job default/held in queue team-a ends (frees the 2 GPUs missing)", True)]


def test_a_pod_larger_than_any_node(capsys, tmp_path):
    a = case(capsys, tmp_path, "  - {name: giant, queue: team-b, gpus: 8}\n", "default/giant")
    details = a["reason"]["details"]
    assert details["kind"] == "no-node-large-enough"
    assert (details["requested_per_pod"], details["largest_node"], details["missing"]) == (8.0, 4.0, 4.0)
    assert hints(a) == [("a node with 8 GPUs joins node pool default", True),
                        ("each pod asks for at most 4 GPUs", None)]


def test_a_gang_blocked_by_its_topology(capsys, tmp_path):
    ring = "  - {name: ring, queue: team-b, replicas: 2, gpus: 4, topology: {topology: dc, required_level: rack}}\n"
    a = case(capsys, tmp_path, SERVING + ring, "default/ring")
    assert a["reason"]["details"]["kind"] == "topology" and a["reason"]["details"]["required_level"] == "rack"
    assert hints(a)[0] == ("the job's rack requirement of topology dc is made a preference", True)


def test_a_job_behind_higher_priority_work_found_by_a_pod_name(capsys, tmp_path):
    late = "  - {name: late, queue: team-b, priority: 75, preemptible: true, replicas: 3, gpus: 4}\n"
    a = case(capsys, tmp_path, SERVING + late, "default/late-1")
    assert a["name"] == "late" and a["pods"] == ["late-0", "late-1", "late-2"]
    details = a["reason"]["details"]
    assert details["kind"] == "behind-higher-priority" and details["missing"] == 4.0
    assert details["held_by"] == [{"job": "default/serving", "queue": "team-b", "priority": 125,
                                   "preemptible": False}]
    assert hints(a) == [("4 more GPUs are free in node pool default", None),
                        ("higher-priority job default/serving ends (frees the 4 GPUs missing)", True)]


def test_a_suggestion_not_enough_on_its_own_is_said_so(capsys):
    gang = answer(capsys, "default/gang")  # ending held frees room that a job ahead of the gang takes
    assert hints(gang)[1] == ("job default/held in queue team-a ends (frees the 2 GPUs missing)", False)


def test_the_kernel_runs_stop_when_the_time_is_up(capsys):
    from kai.sim.explain import explain_offline
    from kai.sim.simulate import load_runs

    status, a = explain_offline(load_runs(CLUSTER, None)[0], "default", "gang", budget=0.0)
    assert status == 200 and {w["verified"] for w in a["reason"]["would_run_if"]} == {"gave up: out of time"}


def test_positions_in_queue_and_cluster(capsys):
    positions = {n: (a["position_in_queue"], a["position_in_cluster"])
                 for n in ("gang", "giant", "late") for a in [answer(capsys, f"default/{n}")]}
    # team-b, below its deserved GPUs, before team-a, at its own: late (priority 75), then giant (50), then gang
    assert positions == {"late": (1, 1), "giant": (2, 2), "gang": (1, 3)}


def test_simulate_explain_gives_the_same_answer_and_text(capsys):
    same = answer(capsys, "default/gang")
    assert main(["simulate", CLUSTER, "--explain", "gang", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == same
    assert main(["simulate", CLUSTER, "--explain", "gang"]) == 0
    text = capsys.readouterr().out
    assert "reason: OverLimit (queue-limit)" in text
    assert "would run if:\n  - queue team-a's gpu limit is raised to 8 (checked: it runs)\n" in text


@pytest.mark.parametrize("target", ["default/ring", "default/nothing"])  # ring is pipelined
def test_not_pending_is_an_error(capsys, target):
    assert main(["explain", target, "--file", CLUSTER]) == 1
    assert "is not pending in the last cycle" in capsys.readouterr().err
