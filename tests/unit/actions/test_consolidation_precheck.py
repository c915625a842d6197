"""Consolidation's pre-check keeps the ready, schedulable nodes' free GPUs summed while no node's amounts change."""

from kai import testing as kt
from kai.actions.consolidation import enough_gpus
from kai.framework import Session


def test_the_free_gpus_kept_for_the_pre_check_follow_every_change_of_the_nodes():
    snapshot = kt.cluster(nodes=[kt.node("n1", gpus=4), kt.node("n2", gpus=4)],
                          queues=[kt.queue("q", deserved_gpus=8)],
                          jobs=[kt.job("running", "q", tasks=[kt.task("r0", gpus=3, status="Running", node="n1")]),
                                kt.job("wants5", "q", gpus=5), kt.job("wants6", "q", gpus=6)])
    session = Session(snapshot, kt.plugin_manager()).open()
    wants5, wants6 = (next(j for j in snapshot.jobs.values() if j.name == name) for name in ("wants5", "wants6"))
    assert enough_gpus(session, wants5) and not enough_gpus(session, wants6)  # 1 + 4 free
    changes = session.arrays.changes
    session.nodes[1].add_task(kt.task("x", gpus=1, status="Running", node="n2"))
    assert session.arrays.changes > changes
    assert not enough_gpus(session, wants5)  # 1 + 3 free now, not the sum kept before
    session.nodes[1].remove_task(next(iter(session.nodes[1].tasks.values())))
    assert enough_gpus(session, wants5)


def test_a_cordoned_nodes_gpus_are_not_counted_by_the_pre_check():
    # As KAI (ValidateIsNodeReady, tolerations or not): cordoned nodes are left out of the sum.
    snapshot = kt.cluster(nodes=[kt.node("n1", gpus=4), kt.node("n2", gpus=4, unschedulable=True)],
                          queues=[kt.queue("q", deserved_gpus=8)], jobs=[kt.job("wants5", "q", gpus=5)])
    session = Session(snapshot, kt.plugin_manager()).open()
    assert not enough_gpus(session, next(iter(snapshot.jobs.values())))
