"""Allocate with topology constraints on random clusters: required domains held, gangs whole, nothing over-committed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kai import testing as kt
from kai.api import ACTIVE_ALLOCATED, PodSet, SubGroup, Topology, TopologyConstraint

ZONE, RACK = "zone", "rack"
DC = Topology("dc", (ZONE, RACK))
LEVELS = st.sampled_from([(ZONE, None), (RACK, None), (None, RACK), (ZONE, RACK), (None, ZONE)])


def constraint(draw) -> TopologyConstraint | None:
    if not draw(st.booleans()):
        return None
    required, preferred = draw(LEVELS)
    return TopologyConstraint("dc", required, preferred)


@st.composite
def clusters(draw):
    """Racks of GPU nodes in one or two zones (some nodes outside the topology), running pods, and pending
    jobs: plain gangs or two-pod-set trees, with random constraints on the job and on each pod set."""
    nodes = []
    for z in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            for k in range(draw(st.integers(1, 3))):
                labels = {ZONE: f"z{z}", RACK: f"r{r}"} if draw(st.integers(0, 5)) else {ZONE: f"z{z}"}
                nodes.append(kt.node(f"z{z}r{r}n{k}", gpus=draw(st.integers(0, 4)), labels=labels))
    jobs = []
    for i, n in enumerate(nodes):
        used = draw(st.integers(0, int(n.allocatable.gpu)))
        if used:
            jobs.append(kt.job(f"bg{i}", queue="bg", gpus=used, status="Running", node=n.name))
    for i in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            n_tasks = draw(st.integers(1, 4))
            job = kt.job(f"j{i}", queue="q", tasks=n_tasks, gpus=draw(st.integers(1, 2)),
                         min_available=draw(st.integers(1, n_tasks)), creation=float(i))
        else:
            sizes = [draw(st.integers(1, 3)) for _ in range(2)]
            tasks = [kt.task(f"j{i}-{p}-{k}", gpus=1, pod_set=f"p{p}") for p in range(2) for k in range(sizes[p])]
            job = kt.job(f"j{i}", queue="q", tasks=tasks, creation=float(i))
            job.subgroups = {"g": SubGroup("g", None, constraint(draw))}
            job.pod_sets = {f"p{p}": PodSet(f"p{p}", draw(st.integers(1, sizes[p])), "g", constraint(draw))
                            for p in range(2)}
        job.topology = constraint(draw)
        jobs.append(job)
    return nodes, jobs


def _run(data):
    nodes, jobs = data
    return kt.run(kt.cluster(nodes=nodes, jobs=jobs, topologies=[DC]))


def _domain(node, level):
    labels = node.labels
    if ZONE not in labels or RACK not in labels:
        return None  # outside the topology
    return (labels[ZONE],) if level == ZONE else (labels[ZONE], labels[RACK])


@given(clusters())
def test_required_levels_hold_for_jobs_subgroups_and_pod_sets(data):
    session = _run(data)
    for job in session.jobs.values():
        if job.name.startswith("bg"):
            continue
        groups = [(job.topology, list(job.tasks.values()))]
        groups += [(sg.topology, list(job.tasks.values())) for sg in job.subgroups.values()]
        groups += [(ps.topology, job.tasks_of(name)) for name, ps in job.pod_sets.items()]
        for c, tasks in groups:
            if c is None or not c.required_level:
                continue
            placed = [t for t in tasks if t.status in ACTIVE_ALLOCATED]
            domains = {_domain(session.node_by_name[t.node].node, c.required_level) for t in placed}
            assert None not in domains, (job.name, "placed outside the topology")
            assert len(domains) <= 1, (job.name, c, domains)


@given(clusters())
def test_pod_sets_reach_their_minimum_together_and_no_node_is_over_committed(data):
    session = _run(data)
    for job in session.jobs.values():
        placed = {name: job.count(name, ACTIVE_ALLOCATED) for name in job.pod_sets}
        if any(placed.values()):
            assert all(placed[n] >= ps.min_available for n, ps in job.pod_sets.items()), (job.name, placed)
    for node in session.nodes:
        assert sum(t.request.gpus for t in node.tasks.values()) <= node.allocatable.gpu
