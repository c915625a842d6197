"""``kai-scheduler explain`` offline and ``simulate --explain``: one dominant reason per pending PodGroup."""

import json
from pathlib import Path

import pytest

from kai.cli import main

CLUSTER = str(Path(__file__).with_name("pending.yaml"))


def answer(capsys, *args):
    assert main(["explain", *args, "--file", CLUSTER, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_gang_over_its_queue_limit(capsys):
    a = answer(capsys, "default/gang")
    assert a["reason"]["code"] == "OverLimit"
    assert a["reason"]["details"] == {"kind": "queue-limit", "queue": "team-a", "resource": "gpu", "limit": 6.0,
                                      "allocated": 4.0, "requested": 4.0, "missing": 2.0}
    assert a["reason"]["would_run_if"][0] == "queue team-a's gpu limit is raised to 8"
    assert "default/held" in a["reason"]["would_run_if"][1]


def test_a_pod_larger_than_any_node(capsys):
    details = answer(capsys, "default/giant")["reason"]["details"]
    assert details["kind"] == "no-node-large-enough"
    assert (details["requested_per_pod"], details["largest_node"], details["missing"]) == (8.0, 4.0, 4.0)


def test_a_gang_blocked_by_its_topology(capsys):
    reason = answer(capsys, "default/ring")["reason"]
    assert reason["details"]["kind"] == "topology" and reason["details"]["required_level"] == "rack"
    assert "rack" in reason["would_run_if"][0]


def test_a_job_behind_higher_priority_work_found_by_a_pod_name(capsys):
    a = answer(capsys, "default/late-1")
    assert a["name"] == "late" and a["pods"] == ["late-0", "late-1"]
    details = a["reason"]["details"]
    assert details["kind"] == "behind-higher-priority" and details["missing"] == 4.0
    assert details["held_by"][0]["job"] == "default/serving"
    assert a["reason"]["would_run_if"] == ["4 more GPUs are free in node pool default",
                                           "higher-priority job default/serving ends (frees the 4 GPUs missing)"]


def test_positions_in_queue_and_cluster(capsys):
    positions = {n: (a["position_in_queue"], a["position_in_cluster"])
                 for n in ("gang", "giant", "ring", "late") for a in [answer(capsys, f"default/{n}")]}
    assert sorted(p[1] for p in positions.values()) == [1, 2, 3, 4]
    assert positions["gang"][0] == 1 and sorted(positions[n][0] for n in ("giant", "ring", "late")) == [1, 2, 3]


def test_simulate_explain_gives_the_same_answer_and_text(capsys):
    same = answer(capsys, "default/gang")
    assert main(["simulate", CLUSTER, "--explain", "gang", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == same
    assert main(["simulate", CLUSTER, "--explain", "gang"]) == 0
    text = capsys.readouterr().out
    assert "reason: OverLimit (queue-limit)" in text and "would run if:" in text


@pytest.mark.parametrize("target", ["default/held", "default/nothing"])
def test_not_pending_is_an_error(capsys, target):
    assert main(["explain", target, "--file", CLUSTER]) == 1
    assert "is not pending in the last cycle" in capsys.readouterr().err
