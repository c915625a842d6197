"""A snapshot reused by session after session: once rewound it equals a fresh build of the same facts, and
a session on it decides exactly what a session on a fresh build decides."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from kai import testing as kt
from kai.api import ResourceRequest
from kai.framework import Plugins, Session, Snapshot
from kai.framework.config import DEFAULT_CONFIG
from kai.framework.journal import JOB_FIELDS, TASK_FIELDS
from kai.plugin_loader import discover

QUEUES = ("q1", "q2", "q3")
ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
PLUGINS = Plugins(attrs.evolve(DEFAULT_CONFIG, actions=ACTIONS, staleness_grace_period=0.0), dict(discover()))


@st.composite
def recipes(draw):
    """Parameters of a busy cluster: running (some releasing, some in gangs below their minimum), shared-GPU
    and pending jobs, a job of a missing queue, sometimes a node whose pods ask more than it has."""
    nodes = [(f"n{i}", draw(st.integers(1, 8)), draw(st.integers(3, 10))) for i in range(draw(st.integers(1, 4)))]
    quotas = [(draw(st.integers(0, 6)), draw(st.sampled_from([50, 100]))) for _ in QUEUES]
    free = {name: [gpus, pods] for name, gpus, pods in nodes}
    running = []
    for i in range(draw(st.integers(0, 8))):
        gpus = draw(st.integers(1, 3))
        fits = [n for n, (g, p) in free.items() if g >= gpus and p >= 1]
        places = [draw(st.sampled_from(fits)) for _ in range(draw(st.integers(1, 2)))] if fits else []
        for node in places:
            free[node][0] -= gpus
            free[node][1] -= 1
        if places:
            running.append((i, gpus, places, draw(st.integers(1, len(places) + 1)), draw(st.sampled_from(QUEUES)),
                            draw(st.sampled_from([10, 50, 100, 150])), draw(st.booleans()),
                            draw(st.sampled_from(["Running", "Running", "Releasing"]))))
    shared = [(i, draw(st.sampled_from(nodes))[0], draw(st.sampled_from([0.25, 0.5])), draw(st.sampled_from(QUEUES)))
              for i in range(draw(st.integers(0, 3)))]
    pending = [(i, draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.sampled_from(QUEUES)),
                draw(st.sampled_from([50, 100, 150])), draw(st.sampled_from([None, 0.5])))
               for i in range(draw(st.integers(1, 4)))]
    overcommit = draw(st.booleans())
    return nodes, quotas, running, shared, pending, overcommit


def build(recipe) -> Snapshot:
    """A fresh snapshot of the recipe's facts."""
    nodes, quotas, running, shared, pending, overcommit = recipe
    queues = [kt.queue(q, deserved_gpus=d, priority=p) for q, (d, p) in zip(QUEUES, quotas, strict=True)]
    jobs = []
    for i, gpus, places, min_available, queue, priority, preemptible, status in running:
        jobs.append(kt.job(f"r{i}", queue=queue, tasks=len(places), gpus=gpus, min_available=min_available,
                           status=status, node=places, priority=priority, preemptible=preemptible,
                           creation=float(i)))
    for i, node, fraction, queue in shared:
        task = kt.task(f"s{i}-0", status="Running", node=node, gpu_groups=(f"dev-{i}",),
                       request=ResourceRequest(cpu=100, memory=2**20, gpu_fraction=fraction))
        jobs.append(kt.job(f"s{i}", queue=queue, tasks=[task], priority=50, creation=20.0 + i))
    for i, tasks, gpus, queue, priority, fraction in pending:
        if fraction is None:
            job = kt.job(f"p{i}", queue=queue, tasks=tasks, gpus=gpus, priority=priority, creation=100.0 + i)
        else:
            job = kt.job(f"p{i}", queue=queue, tasks=[kt.task(f"p{i}-{k}", request=ResourceRequest(
                cpu=100, memory=2**20, gpu_fraction=fraction)) for k in range(tasks)], priority=priority,
                creation=100.0 + i)
        jobs.append(job)
    jobs.append(kt.job("lost", queue="missing", tasks=1, gpus=1))
    node_objects = [kt.node(name, gpus=gpus, max_pods=pods + 4) for name, gpus, pods in nodes]
    if overcommit:
        jobs.append(kt.job("big", queue="q1", tasks=1, gpus=20, status="Running", node=nodes[0][0]))
    return kt.cluster(nodes=node_objects, queues=queues, jobs=jobs)


def facts(snapshot: Snapshot):
    """Everything a session may change on a snapshot, comparable between snapshots of the same facts."""
    tasks = {t.uid: tuple(getattr(t, f) for f in TASK_FIELDS)
             for j in snapshot.jobs.values() for t in j.tasks.values()}
    jobs = {j.uid: tuple(getattr(j, f) for f in JOB_FIELDS) for j in snapshot.jobs.values()}
    return tasks, jobs, [str(p) for p in snapshot.problems]


def outcome(session: Session):
    """The session's decisions and fit errors; device ids it made up are named by their order."""
    made_up: dict[str, str] = {}

    def device(g: str) -> str:
        return g if g.startswith("dev-") else made_up.setdefault(g, f"new-{len(made_up)}")

    decisions = [(d.kind, d.task.uid, d.node, d.message, tuple(device(g) for g in d.gpu_groups))
                 for d in session.decisions]
    return decisions, dict(session.task_fit_errors), {u: session.job_fit_detail(session.jobs[u])
                                                     for u in session.job_fit_errors if u in session.jobs}, \
        [str(p) for p in session.snapshot.problems]


def run(snapshot: Snapshot) -> Session:
    session = Session(snapshot, PLUGINS).open()
    session.run_actions()
    session.close()
    return session


@settings(max_examples=150, deadline=None)
@given(recipes())
def test_a_reused_snapshot_decides_as_a_fresh_one(recipe):
    reused = build(recipe)
    before = facts(reused)
    first = outcome(run(reused))
    reused.rewind()
    assert facts(reused) == before
    second = outcome(run(reused))  # keeps the node accounting for the next sessions
    third = outcome(run(reused))  # copies it
    assert second == first and third == first
    assert third == outcome(run(build(recipe)))
    reused.rewind()
    assert facts(reused) == facts(build(recipe))
