"""The full default action list on random clusters with deleted nodes, dangling references and shrunk
nodes: nothing raises or is contained as an internal error, no live node is over-committed by the
decisions, nothing new is bound to a node that already was, and no pod of a missing node is touched."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from kai import testing as kt
from kai.api import ACTIVE_USED, TaskStatus
from kai.framework import DEFAULT_CONFIG, Plugins, run_session

EPS = 1e-6
QUEUES = ("q1", "q2", "q3")
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
PLACED = ("Running", "Bound", "Binding", "Releasing")
CONFIG = attrs.evolve(DEFAULT_CONFIG, actions=ACTIONS, staleness_grace_period=0.0)


@st.composite
def faulty_clusters(draw):
    """Live nodes filled with placed pods, then some nodes shrunk below what they hold; placed pods on
    deleted nodes (``gone*``, as a Binding pod whose BindRequest names a missing node); jobs of a queue
    that does not exist; and pending jobs."""
    nodes = [kt.node(f"n{i}", gpus=draw(st.integers(0, 8)), cpu=draw(st.sampled_from([4000, 8000])),
                     max_pods=draw(st.integers(1, 6))) for i in range(draw(st.integers(1, 4)))]
    queues = [kt.queue(q, deserved_gpus=draw(st.integers(0, 4)), priority=draw(st.sampled_from([50, 100])))
              for q in QUEUES]
    free = {n.name: [n.allocatable.gpu, n.allocatable.cpu, n.max_pods] for n in nodes}
    jobs = []
    for i in range(draw(st.integers(0, 8))):
        gpus, cpu = draw(st.integers(0, 2)), draw(st.sampled_from([500, 1000, 2000]))
        places = []
        for _ in range(draw(st.integers(1, 3))):
            fits = [n for n, (g, c, p) in free.items() if g >= gpus and c >= cpu and p >= 1]
            node = draw(st.sampled_from(fits + ["gone0", "gone1"]))
            if node in free:
                free[node][0] -= gpus
                free[node][1] -= cpu
                free[node][2] -= 1
            places.append(node)
        tasks = [kt.task(f"r{i}-{k}", gpus, cpu, status=draw(st.sampled_from(PLACED)), node=node, creation=float(i))
                 for k, node in enumerate(places)]
        job = kt.job(f"r{i}", queue=draw(st.sampled_from(QUEUES + ("ghost",))), tasks=tasks,
                     min_available=draw(st.integers(1, len(tasks) + 1)), priority=draw(st.sampled_from([10, 50, 150])),
                     preemptible=draw(st.booleans()), creation=float(i))
        job.stale_since = kt.NOW - 3600 if draw(st.booleans()) else None
        jobs.append(job)
    for i in range(draw(st.integers(1, 4))):
        n_tasks = draw(st.integers(1, 3))
        jobs.append(kt.job(f"p{i}", queue=draw(st.sampled_from(QUEUES + ("ghost",))), tasks=n_tasks,
                           gpus=draw(st.integers(0, 3)), cpu=draw(st.sampled_from([500, 1000, 3000])),
                           min_available=draw(st.integers(1, n_tasks)), priority=draw(st.sampled_from([50, 100, 150])),
                           creation=100.0 + i))
    for n in nodes:  # the node shrinks after its pods were placed (a device or CPUs taken away)
        if draw(st.booleans()):
            n.allocatable.gpu = float(draw(st.integers(0, int(n.allocatable.gpu))))
            n.allocatable.cpu = float(draw(st.sampled_from([1000, 2000, n.allocatable.cpu])))
            n.max_pods = draw(st.integers(0, n.max_pods))
    return nodes, queues, jobs


def _held(jobs, node: str) -> tuple[float, float, int]:
    """GPUs, CPU and pods the pods occupying ``node`` ask for (pipelined ones only wait)."""
    tasks = [t for j in jobs for t in j.tasks.values()
             if t.node == node and t.status in ACTIVE_USED and t.status is not TaskStatus.PIPELINED]
    return sum(t.request.gpus for t in tasks), sum(t.request.cpu for t in tasks), len(tasks)


def _over(node, held) -> bool:
    gpus, cpu, pods = held
    return gpus > node.allocatable.gpu + EPS or cpu > node.allocatable.cpu + EPS or pods > node.max_pods


@given(faulty_clusters())
def test_faulty_clusters_are_scheduled_without_errors_or_over_commitment(data):
    nodes, queues, jobs = data
    snap = kt.cluster(nodes=nodes, queues=queues, jobs=jobs)
    kept = list(snap.jobs.values())
    live = {n.name for n in nodes}
    for n in nodes:  # as the live cache does: the pods of a job left out still hold their node
        gpus, cpu, pods = _held(snap.rejected_jobs.values(), n.name)
        n.allocatable.gpu, n.allocatable.cpu, n.max_pods = n.allocatable.gpu - gpus, n.allocatable.cpu - cpu, \
            n.max_pods - pods
    over_before = {n.name for n in nodes if _over(n, _held(kept, n.name))}
    on_missing = {t.uid: (t.status, t.node) for j in kept for t in j.tasks.values()
                  if t.status in ACTIVE_USED and t.node not in live}

    session = run_session(snap, Plugins(CONFIG))

    assert session.errors == []
    for d in session.decisions:
        assert d.task.uid not in on_missing, d
        assert d.task.job in snap.jobs, d  # never a job of a missing queue
        assert d.node in live, d
        assert not (d.kind == "bind" and d.node in over_before), d
    for j in kept:
        for t in j.tasks.values():
            if t.uid in on_missing:
                assert (t.status, t.node) == on_missing[t.uid]
    for n in nodes:
        if n.name not in over_before:
            assert not _over(n, _held(kept, n.name)), n.name
    assert {p.name for p in snap.problems if p.reason == "NodeOverCommitted"} == over_before
    assert {p.name for p in snap.problems if p.reason == "NodeNotFound"} == set(on_missing)
