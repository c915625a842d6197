"""A node whose placed pods ask more than it has (its allocatable shrank): reported, and it takes no new pod
until it has room."""

from __future__ import annotations

from kai import testing as kt
from kai.api import ResourceRequest
from kai.framework import DEFAULT_CONFIG, Session, cluster_capacity

ALL_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
MIG = "nvidia.com/mig-1g.10gb"


def _shrunk(*jobs, statuses=("Running", "Running", "Running"), n2_gpus=2):
    """n1 shrank to 4 GPUs under three 2-GPU pods of job ``old``; n2 has ``n2_gpus`` free GPUs."""
    old = kt.job("old", "q2", tasks=[kt.task(f"old-{i}", gpus=2, status=s, node="n1") for i, s in enumerate(statuses)],
                 priority=10, min_available=1)
    return kt.cluster(nodes=[kt.node("n1", gpus=4), kt.node("n2", gpus=n2_gpus)],
                      queues=[kt.queue("q", deserved_gpus=2), kt.queue("q2", deserved_gpus=4)], jobs=[old, *jobs])


def test_an_overcommitted_node_is_reported_and_takes_nothing_new():
    snap = _shrunk(kt.job("cpu", "q", tasks=3, creation=1.0, min_available=1))
    session = kt.run(snap, plugins=DEFAULT_CONFIG.plugins, actions=ALL_ACTIONS)
    [problem] = snap.problems
    assert (problem.kind, problem.name, problem.reason) == ("node", "n1", "NodeOverCommitted")
    assert problem.message == ("the pods placed on the node ask more than it has (GPUs 6 of 4); "
                               "no new pod is placed on it until it has room")
    assert session.errors == []
    assert set(kt.placements(session).values()) == {"n2"}
    assert len(kt.placements(session)) == 3


def test_an_overcommitted_node_takes_pods_again_once_its_releasing_pods_make_room():
    # idle -2 GPUs, releasing 4: a 2-GPU pod can wait for the room (pipelined), a 3-GPU pod cannot
    snap = _shrunk(kt.job("two", "q", gpus=2, creation=1.0), kt.job("three", "q", gpus=3, creation=2.0),
                   statuses=("Releasing", "Releasing", "Running"), n2_gpus=0)
    session = kt.run(snap, plugins=DEFAULT_CONFIG.plugins, actions=("allocate",))
    assert kt.placements(session, "pipeline") == {"two-0": "n1"}
    assert "three-0" not in kt.placements(session) | kt.placements(session, "pipeline")


def test_a_node_short_of_an_extended_resource_takes_nothing_new():
    held = kt.task("mig-0", status="Running", node="n1", request=ResourceRequest(cpu=1000, mig={MIG: 2}))
    snap = kt.cluster(nodes=[kt.node("n1", scalars={MIG: 1}), kt.node("n2")],
                      jobs=[kt.job("mig", tasks=[held]), kt.job("cpu", tasks=2, creation=1.0, min_available=1)])
    session = kt.run(snap, plugins=[], actions=ALL_ACTIONS)  # no scores: n1 would win by name
    assert [p.message for p in snap.problems] == [
        "the pods placed on the node ask more than it has (nvidia.com/mig-1g.10gb 2 of 1); "
        "no new pod is placed on it until it has room"]
    assert kt.placements(session) == {"cpu-0": "n2", "cpu-1": "n2"}


def test_capacity_counts_a_node_below_zero_as_zero():
    nodes = [kt.node("n1", gpus=4, cpu=8000), kt.node("n2", gpus=2, cpu=8000)]
    nodes[1].allocatable.gpu = -3.0  # pods of another scheduler hold more than the node has
    session = Session(kt.cluster(nodes=nodes), kt.plugin_manager([]))
    assert cluster_capacity(session)[2] == 4.0
