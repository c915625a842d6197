"""Shared GPUs on random nodes: devices never over-committed by allocate, every statement undone exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kai import testing as kt
from kai.api import ACTIVE_ALLOCATED, ResourceRequest, TaskStatus
from kai.framework import Session
from kai.framework.gpusharing import node_gpu_memory, task_gpu_memory

FRACTIONS = st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.7, 1.0])


def shared_request(draw):
    if draw(st.booleans()):
        return ResourceRequest(cpu=100, memory=2**20, gpu_memory_mib=draw(st.sampled_from([100, 250, 400, 800])),
                               gpu_devices=draw(st.integers(1, 2)))
    return ResourceRequest(cpu=100, memory=2**20, gpu_fraction=draw(FRACTIONS), gpu_devices=draw(st.integers(1, 2)))


@st.composite
def clusters(draw):
    """Nodes of 1-3 devices with running and releasing shared tasks on them, pending shared and whole tasks."""
    nodes = [kt.node(f"n{i}", gpus=draw(st.integers(1, 3)), gpu_memory_mib=800, max_pods=draw(st.integers(3, 12)))
             for i in range(draw(st.integers(1, 3)))]
    jobs = []
    for i, n in enumerate(nodes):
        # Devices filled within their memory by placed shared tasks, some releasing.
        for d in range(int(n.allocatable.gpu)):
            used = 0
            for k in range(draw(st.integers(0, 3))):
                fraction = draw(FRACTIONS)
                if used + fraction * 800 > 800:
                    break
                used += int(fraction * 800)
                status = draw(st.sampled_from(["Running", "Releasing"]))
                task = kt.task(f"r{i}{d}{k}-0", status=status, node=n.name, gpu_groups=(f"d{d}",),
                               request=ResourceRequest(cpu=100, memory=2**20, gpu_fraction=fraction))
                jobs.append(kt.job(f"r{i}{d}{k}", queue="bg", tasks=[task]))
                # Room for the placed pod (and, with the first one, the device's reservation pod).
                n.max_pods += 1 + (k == 0)
    for i in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 3)):
            task = kt.task(f"p{i}-0", request=shared_request(draw))
        else:
            task = kt.task(f"p{i}-0", gpus=1, cpu=100, memory=2**20)
        jobs.append(kt.job(f"p{i}", queue="q", tasks=[task], creation=float(i)))
    return nodes, jobs


def state(session):
    a = session.arrays
    return (tuple(a.idle_gpu), tuple(a.rel_gpu), tuple(a.idle_pods), tuple(a.rel_pods),
            [{g: repr(v) for g, v in n.gpu_groups.items()} for n in session.nodes])


@given(clusters())
def test_allocate_never_over_commits_a_device(data):
    nodes, jobs = data
    session = kt.run(kt.cluster(nodes=nodes, jobs=jobs))
    for node in session.nodes:
        placed = [t for t in node.tasks.values() if t.status in ACTIVE_ALLOCATED and t.request.is_shared_gpu]
        for gid in node.gpu_groups:
            used = sum(task_gpu_memory(node, t.request) for t in placed if gid in t.gpu_groups)
            assert used <= node_gpu_memory(node)
        whole = sum(t.request.gpus for t in node.tasks.values() if t.status in ACTIVE_ALLOCATED)
        shared_devices = {g for t in placed for g in t.gpu_groups}
        assert whole + len(shared_devices) <= node.allocatable.gpu
        assert session.arrays.idle_pods[node.index] >= 0


@given(clusters(), st.randoms(use_true_random=False))
def test_a_discarded_statement_leaves_every_device_as_it_was(data, rnd):
    nodes, jobs = data
    session = Session(kt.cluster(nodes=nodes, jobs=jobs), kt.plugin_manager()).open()
    before = state(session)
    stmt = session.statement()
    tasks = [t for j in session.jobs.values() for t in j.tasks.values()]
    rnd.shuffle(tasks)
    for task in tasks:
        if task.status in (TaskStatus.RUNNING,) and rnd.random() < 0.5:
            stmt.evict(task, "test")
        elif task.status is TaskStatus.PENDING:
            options = session.feasible_nodes(task, session.jobs[task.job])
            if options:
                node, fits_idle = rnd.choice(options)
                stmt.place(task, node, fits_idle, rnd.random() < 0.3)
    for task in tasks:
        if task.status is TaskStatus.RELEASING and task.uid in session.evicted and rnd.random() < 0.5:
            options = session.feasible_nodes(task, session.jobs[task.job])
            if options:
                stmt.pipeline(task, rnd.choice(options)[0].name)
    stmt.discard()
    assert state(session) == before
