"""KAI v0.17's multi-topology allocation tests assert the domains each pod set lands in, which the scenario
format cannot state; these tests check them on the same scenarios (allocate_multi_topology_test.go)."""

from collections import Counter
from pathlib import Path

import pytest

from kai.api.status import TaskStatus
from kai.sim.conformance import Runner
from kai.sim.rounds import run_round
from kai.sim.scenario import load_scenarios

FILE = Path(__file__).parents[2] / "conformance" / "kai-v017-more" / "allocate__allocate_multi_topology.yaml"
RACK, ZONE = "topology.test/rack-domain", "topology.test/zone-domain"


@pytest.fixture(scope="module")
def placed():
    """Per scenario index: pod set -> [(node, its labels)] of the job's tasks after one allocate."""
    runner = Runner()
    out = []
    for sc in load_scenarios(str(FILE)):
        session = run_round(sc, runner.plugins(sc), sc.actions)
        labels = {n.name: n.labels for n in session.snapshot.nodes}
        [job] = [j for j in session.snapshot.jobs.values() if j.name.startswith("pending_job")]
        by_set: dict[str, list] = {}
        for task in job.tasks.values():
            assert task.status is TaskStatus.BINDING, task.name
            by_set.setdefault(task.pod_set, []).append((task.node, labels[task.node]))
        out.append(by_set)
    return out


def test_two_pod_sets_each_keep_to_a_domain_of_their_own_topology(placed):
    by_set = placed[0]
    assert Counter(lab[RACK] for _, lab in by_set["rack-workers"]) == {"rack-a": 3}
    assert Counter(lab[ZONE] for _, lab in by_set["zone-workers"]) == {"zone-x": 3}
    assert {node for node, _ in by_set["rack-workers"]} == {"node0", "node1"}
    assert {node for node, _ in by_set["zone-workers"]} == {"node2", "node4"}


def test_children_share_the_parents_zone_and_each_takes_a_rack_of_its_own(placed):
    by_set = placed[1]
    racks = []
    for child in ("child-a", "child-b"):
        assert Counter(lab[ZONE] for _, lab in by_set[child]) == {"zone-x": 3}
        [rack] = {lab[RACK] for _, lab in by_set[child]}
        racks.append(rack)
    assert sorted(racks) == ["rack-a", "rack-b"]
