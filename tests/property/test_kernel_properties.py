"""Allocate on random clusters: no node over-committed, gangs all-or-nothing, queue limits held."""

from __future__ import annotations

import copy
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from kai import hookimpl
from kai import testing as kt
from kai.api import ACTIVE_ALLOCATED, TaskStatus
from kai.framework.config import DEFAULT_CONFIG

EPS = 1e-6
LEAVES = ("q1", "q2", "q3")


@st.composite
def clusters(draw):
    """Nodes, a two-level queue tree with GPU limits, pending gangs, and some running/releasing tasks."""
    nodes = [kt.node(f"n{i}", gpus=draw(st.integers(0, 8)), cpu=draw(st.sampled_from([4000, 8000, 16000])),
                     max_pods=draw(st.integers(1, 6)))
             for i in range(draw(st.integers(1, 5)))]
    limit = st.one_of(st.just(-1.0), st.integers(0, 12).map(float))
    deserved = draw(st.integers(0, 4))
    root_limit = max(draw(limit), deserved) if draw(st.booleans()) else -1.0
    queues = [kt.queue("root", deserved_gpus=deserved, limit_gpus=root_limit)]
    for name in LEAVES:
        d = draw(st.integers(0, 4))
        lim = draw(limit)
        queues.append(kt.queue(name, parent="root", deserved_gpus=d, limit_gpus=-1.0 if lim == -1 else max(lim, d),
                               priority=draw(st.integers(50, 150))))
    queues.append(kt.queue("bg"))
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        n_tasks = draw(st.integers(1, 4))
        jobs.append(kt.job(f"j{i}", queue=draw(st.sampled_from(LEAVES)), tasks=n_tasks, gpus=draw(st.integers(0, 3)),
                           cpu=draw(st.sampled_from([500, 1000, 3000])), min_available=draw(st.integers(1, n_tasks)),
                           priority=draw(st.sampled_from([50, 100, 150])), creation=float(i)))
    # Background pods already on the nodes, within each node's capacity; some are on their way out.
    for i, n in enumerate(nodes):
        gpus = draw(st.integers(0, int(n.allocatable.gpu)))
        if gpus and n.max_pods:
            status = draw(st.sampled_from(["Running", "Releasing"]))
            jobs.append(kt.job(f"bg{i}", queue="bg", gpus=gpus, cpu=1000, status=status, node=n.name))
    return nodes, queues, jobs


def _run(data):
    nodes, queues, jobs = data
    snap = kt.cluster(nodes=nodes, queues=queues, jobs=jobs)
    pending_before = {j.uid: {t.uid for t in j.tasks.values() if t.status is TaskStatus.PENDING} for j in jobs}
    return kt.run(snap, plugins=DEFAULT_CONFIG.plugins), pending_before


@given(clusters())
def test_no_node_is_over_committed(data):
    session, _ = _run(data)
    a = session.arrays
    for i, node in enumerate(session.nodes):
        for kind in ("cpu", "mem", "gpu", "pods"):
            # Pipelined tasks are charged to the releasing amounts alone (KAI's accounting), so only
            # the idle amounts -- what binds use -- are bounded below.
            assert getattr(a, f"idle_{kind}")[i] >= -EPS, (node.name, kind)
        # Independently of the arrays: what occupies the node now (pipelined tasks wait) fits it.
        now = [t for t in node.tasks.values() if t.status is not TaskStatus.PIPELINED]
        assert sum(t.request.gpus for t in now) <= node.allocatable.gpu + EPS
        assert sum(t.request.cpu for t in now) <= node.allocatable.cpu + EPS
        assert len(now) <= node.node.max_pods


@given(clusters())
def test_gangs_are_all_or_nothing(data):
    session, pending_before = _run(data)
    placed = defaultdict(set)
    for d in session.decisions:
        if d.kind in ("bind", "pipeline"):
            placed[d.task.job].add(d.task.uid)
    for job in session.jobs.values():
        if not placed[job.uid]:
            assert all(t.status is TaskStatus.PENDING for t in job.tasks.values() if t.uid in pending_before[job.uid])
            continue
        for name, ps in job.pod_sets.items():
            assert job.count(name, ACTIVE_ALLOCATED) >= ps.min_available, (job.name, name)


@given(clusters())
def test_queue_limits_are_held(data):
    session, _ = _run(data)
    used = defaultdict(float)
    for job in session.jobs.values():
        gpus = sum(t.request.gpus for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED)
        for q in session.ancestors(job.queue):
            used[q.name] += gpus
    for q in session.queues.values():
        if q.gpu.limit >= 0:
            assert used[q.name] <= q.gpu.limit + EPS, (q.name, used[q.name], q.gpu.limit)


class _EveryNode:
    """A predicate that vetoes nothing and does not say it treats alike nodes alike: every node is looked at."""

    @hookimpl
    def kai_predicate(self, node):
        return None


def _outcome(data, extra_plugins):
    nodes, queues, jobs = copy.deepcopy(data)
    snap = kt.cluster(nodes=nodes, queues=queues, jobs=jobs)
    session = kt.run(snap, plugins=[*DEFAULT_CONFIG.plugins, *extra_plugins],
                     extra_plugins={"everynode": lambda a: _EveryNode()})
    return ([(d.kind, d.task.uid, d.node) for d in session.decisions], session.task_fit_errors,
            {uid: session.job_fit_message(j) for uid, j in session.jobs.items()})


@given(clusters())
def test_node_classes_choose_as_looking_at_every_node_does(data):
    assert _outcome(data, []) == _outcome(data, ["everynode"])
