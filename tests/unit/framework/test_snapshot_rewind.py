"""A session's changes stay on its snapshot until it is rewound; the next session on it rewinds first."""

from __future__ import annotations

from kai import testing as kt
from kai.api import NumaTopology, NumaZone, TaskStatus, ZonePlacement
from kai.framework import PluginSpec, Session
from kai.framework.snapshot import NODE_OVERCOMMITTED
from kai.plugins.proportion.shares import MEMO


def test_the_outcome_shows_until_the_next_session_rewinds_the_snapshot():
    snap = kt.cluster([kt.node("n", gpus=2)], jobs=[kt.job("a", gpus=1)])
    task = snap.jobs["default/a"].tasks["a-0"]
    kt.run(snap)
    assert (task.status, task.node) == (TaskStatus.BINDING, "n")
    assert snap.jobs["default/a"].last_start == kt.NOW
    session = Session(snap, kt.plugin_manager())
    assert (task.status, task.node, snap.jobs["default/a"].last_start) == (TaskStatus.PENDING, None, None)
    assert session.arrays.idle_gpu[0] == 2.0


def test_rewinding_a_snapshot_no_session_used_changes_nothing():
    snap = kt.cluster([kt.node("n", gpus=1)], jobs=[kt.job("a", gpus=1, status="Running", node="n")])
    snap.rewind()
    assert snap.jobs["default/a"].tasks["a-0"].status is TaskStatus.RUNNING and snap.problems == []


def test_node_accounting_is_reused_but_each_session_has_its_own():
    snap = kt.cluster([kt.node("n", gpus=4)], jobs=[kt.job("r", gpus=1, status="Running", node="n"),
                                                   kt.job("p", gpus=2)])
    first = kt.run(snap)
    assert first.arrays.idle_gpu[0] == 1.0 and set(first.nodes[0].tasks) == {"default/r-0", "default/p-0"}
    second = kt.run(snap)
    assert second.arrays.idle_gpu[0] == 1.0 and kt.placements(second) == {"p-0": "n"}
    assert first.arrays is not second.arrays and first.nodes[0].tasks is not second.nodes[0].tasks


def test_problems_found_by_a_session_are_reported_once_per_session():
    snap = kt.cluster([kt.node("n", gpus=1)], jobs=[kt.job("r", gpus=2, status="Running", node="n")])
    for _ in range(2):
        kt.run(snap)
        assert [p.reason for p in snap.problems] == [NODE_OVERCOMMITTED]


def test_an_arriving_job_leaves_with_the_rewind():
    snap = kt.cluster([kt.node("n", gpus=1)], jobs=[kt.job("a", queue="q")])
    session = Session(snap, kt.plugin_manager()).open()
    assert session.add_job(kt.job("late", queue="q")) == []
    assert "default/late" in snap.jobs
    snap.rewind()
    assert set(snap.jobs) == {"default/a"}


def test_a_numa_placement_set_when_the_session_opens_is_put_back():
    node = kt.node("n", numa=NumaTopology("single-numa-node", "pod", (NumaZone("node-0", {"cpu": 4000.0},
                                                                                {"cpu": 4000.0}),)))
    job = kt.job("r", cpu=3000, status="Running", node="n", qos_class="Guaranteed",
                 numa_recorded=(ZonePlacement("node-0", {"cpu": 3000.0}),))
    snap = kt.cluster([node], jobs=[job])
    Session(snap, kt.plugin_manager([PluginSpec("numa")])).open()
    assert job.tasks["r-0"].numa_placement == (ZonePlacement("node-0", {"cpu": 3000.0}),)
    snap.rewind()
    assert job.tasks["r-0"].numa_placement == ()


def test_proportion_counts_the_queues_of_a_snapshot_once_and_divides_each_session():
    snap = kt.cluster([kt.node("n", gpus=4)], queues=[kt.queue("q", deserved_gpus=1)],
                      jobs=[kt.job("r", queue="q", gpus=1, status="Running", node="n"), kt.job("p", queue="q", gpus=2)])
    kt.run(snap, actions=("allocate",))
    allocated, _, request = snap.memo.get(MEMO).queues["q"]
    assert allocated[2] == 1.0 and request[2] == 3.0  # counted before the session placed p
    snap.usage = {"q": (0.0, 0.0, 0.5)}
    session = Session(snap, kt.plugin_manager()).open()
    shares = session.plugins.plugin("proportion").shares["q"]
    assert shares.allocated[2] == 1.0 and shares.request[2] == 3.0 and shares.usage == [0.0, 0.0, 0.5]
