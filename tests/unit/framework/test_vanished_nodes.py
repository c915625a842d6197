"""Pods bound to a node that is gone (deleted while pods were placed on it): they hold nothing, are never
victims, and the cycle goes on."""

from __future__ import annotations

import pytest

from kai import testing as kt
from kai.api import TaskStatus
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, run_session


def _victim_half_on_a_gone_node(queue: str):
    """Node n1 (1 GPU) full with one task of gang ``v``, whose other task is bound to the deleted node
    ``gone``; ``r`` (queue q1, owed a GPU) waits for a GPU."""
    return kt.cluster(
        nodes=[kt.node("n1", gpus=1), kt.node("n2", gpus=1)],
        queues=[kt.queue("q1", deserved_gpus=1), kt.queue("q2")],
        jobs=[kt.job("v", queue, tasks=2, gpus=1, priority=10, status="Running", node=["n1", "gone"],
                     preemptible=True),
              kt.job("b", queue, gpus=1, priority=200, status="Running", node="n2", preemptible=False),
              kt.job("r", "q1", gpus=1, priority=50, creation=5.0, preemptible=True)])


@pytest.mark.parametrize(("action", "queue"), [("reclaim", "q2"), ("preempt", "q1")])
def test_a_victim_with_a_task_on_a_gone_node_is_evicted_on_live_nodes_only(action, queue):
    # Before, the solver simulated the scenario on node "gone" and raised KeyError: 'gone', failing the cycle.
    session = kt.run(_victim_half_on_a_gone_node(queue), plugins=DEFAULT_CONFIG.plugins, actions=(action,))
    assert session.errors == []
    assert kt.placements(session, "evict") == {"v-0": "n1"}
    assert kt.placements(session, "pipeline") == {"r-0": "n1"}
    gone = session.jobs["default/v"].tasks["v-1"]
    assert (gone.status, gone.node) == (TaskStatus.RUNNING, "gone")


def test_a_job_whose_pods_all_run_on_gone_nodes_is_no_victim():
    snap = kt.cluster(
        nodes=[kt.node("n1", gpus=1)], queues=[kt.queue("q1", deserved_gpus=1), kt.queue("q2")],
        jobs=[kt.job("v", "q2", gpus=1, priority=10, status="Running", node="gone", preemptible=True),
              kt.job("b", "q1", gpus=1, priority=200, status="Running", node="n1", preemptible=False),
              kt.job("r", "q1", gpus=1, priority=50, creation=5.0)])
    session = kt.run(snap, plugins=DEFAULT_CONFIG.plugins,
                     actions=("allocate", "consolidation", "reclaim", "preempt"))
    assert session.errors == []
    assert session.decisions == []
    assert [p.reason for p in snap.problems] == ["NodeNotFound"]


def test_consolidation_never_moves_a_pod_of_a_gone_node():
    snap = kt.cluster(
        nodes=[kt.node("n1", gpus=2), kt.node("n2", gpus=2)], queues=[kt.queue("q", deserved_gpus=4)],
        jobs=[kt.job("a", "q", tasks=2, gpus=1, priority=10, status="Running", node=["n1", "gone"], min_available=1),
              kt.job("c", "q", gpus=1, priority=10, status="Running", node="n2"),
              kt.job("big", "q", gpus=2, priority=10, creation=5.0)])
    session = kt.run(snap, plugins=DEFAULT_CONFIG.plugins, actions=("consolidation",))
    assert session.errors == []
    assert "a-1" not in kt.placements(session, "evict")
    assert "a-1" not in kt.placements(session, "pipeline")


def test_stale_gang_eviction_leaves_pods_of_gone_nodes_alone():
    job = kt.job("g", tasks=[kt.task("g-0", gpus=1, status="Running", node="n1"),
                             kt.task("g-1", gpus=1, status="Running", node="gone"),
                             kt.task("g-2", gpus=1)], min_available=3)
    job.stale_since = kt.NOW - 600
    snapshot = kt.cluster([kt.node("n1", gpus=4)], jobs=[job])
    session = run_session(snapshot, Plugins(SchedulerConfig(("stalegangeviction",), DEFAULT_CONFIG.plugins, 60.0)))
    assert kt.placements(session, "evict") == {"g-0": "n1"}
