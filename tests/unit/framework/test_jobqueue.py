"""JobQueue: the next job across the queue tree, with siblings kept in tournaments between pops."""

from __future__ import annotations

import random

import pytest

from kai import hookimpl
from kai import testing as kt
from kai.api import Job, TaskStatus
from kai.framework import Session
from kai.framework.jobqueue import JobQueue


def _scan(session: Session, jq: JobQueue, parent: str | None = None):
    """The next (queue, job, leaf) by comparing every sibling in order, at every level (the reference)."""
    best = None
    for q in session.children.get(parent, ()):
        entries = jq.leaves.get(q.name)
        if entries:
            job, leaf = (entries[-1][1] if jq.reverse else entries[0][1]), q.name
        else:
            sub = _scan(session, jq, q.name)
            if sub is None:
                continue
            job, leaf = sub[1], sub[2]
        if best is None:
            best = (q, job, leaf)
        elif jq.reverse:
            if session.compare_queues(q, best[0], None, None, jq.popped.get(leaf, []) + [job],
                                      jq.popped.get(best[2], []) + [best[1]]) > 0:
                best = (q, job, leaf)
        elif session.compare_queues(q, best[0], job, best[1]) < 0:
            best = (q, job, leaf)
    return best


def _tree_session(seed: int, departments: int = 3, leaves: int = 7) -> Session:
    """Queues two levels deep with uneven quotas, running and pending jobs of uneven sizes (proportion)."""
    rng = random.Random(seed)
    queues = [kt.queue(f"d{d}", deserved_gpus=rng.choice([4, 8, 16]), creation=float(d)) for d in range(departments)]
    names = [f"d{d}-q{q}" for d in range(departments) for q in range(leaves)]
    queues += [kt.queue(n, parent=n.split("-")[0], deserved_gpus=rng.choice([0, 1, 2, 4]),
                        priority=rng.choice([100, 100, 200]), creation=float(k)) for k, n in enumerate(names)]
    nodes = [kt.node(f"n{i}", gpus=8) for i in range(12)]
    jobs = []
    for k in range(60):
        running = k % 3 == 0
        jobs.append(kt.job(f"j{k}", queue=rng.choice(names), tasks=rng.choice([1, 1, 2]), gpus=rng.choice([1, 2]),
                           creation=float(rng.randrange(50)), status="Running" if running else "Pending",
                           node=f"n{k % 12}" if running else None))
    snap = kt.cluster(nodes=nodes, queues=queues, jobs=jobs)
    return Session(snap, kt.plugin_manager(["predicates", "proportion"])).open()


@pytest.mark.parametrize("seed", range(6))
def test_pop_order_matches_comparing_every_sibling_while_tasks_move(seed):
    session = _tree_session(seed)
    rng = random.Random(seed)
    pending = [j for j in session.jobs.values() if j.has_pending()]
    running = [t for j in session.jobs.values() for t in j.tasks.values() if t.status is TaskStatus.RUNNING]
    jq = JobQueue(session, pending)
    popped = 0
    while jq:
        expected = _scan(session, jq)
        job = jq.pop()
        assert expected is not None and job is expected[1]
        popped += 1
        stmt = session.statement()
        for task in list(job.tasks.values())[:1]:  # one task bound per pop: the job's queue and its parents move
            stmt.allocate(task, f"n{rng.randrange(12)}")
        if rng.random() < 0.3 and running:  # a task of some other queue leaves
            stmt.evict(running.pop(rng.randrange(len(running))), "test")
        stmt.commit()
        if job.has_pending() and rng.random() < 0.5:
            jq.push(job)
    assert popped >= len(pending)


@pytest.mark.parametrize("seed", range(3))
def test_victim_order_matches_comparing_every_sibling(seed):
    session = _tree_session(seed)
    placed = [j for j in session.jobs.values() if not j.has_pending()]
    jq = JobQueue(session, placed, reverse=True)
    copy = None
    while jq:
        expected = _scan(session, jq)
        job = jq.pop()
        assert job is expected[1]
        stmt = session.statement()
        for task in job.tasks.values():  # the victim leaves: its queue is represented by less from now on
            stmt.evict(task, "test")
        stmt.commit()
        if copy is None:
            copy = jq.copy()
    while copy:  # a copy goes on from where it was taken, on the session as it is now
        expected = _scan(session, copy)
        assert copy.pop() is expected[1]


def test_a_pop_compares_about_log2_siblings():
    queues = [kt.queue(f"q{i}", creation=float(i)) for i in range(64)]
    jobs = [kt.job(f"j{i}-{k}", queue=f"q{i}", gpus=1, creation=float(k)) for i in range(64) for k in range(3)]
    calls = []

    class CountingOrder:
        @hookimpl
        def kai_queue_order(self, left, right, left_job, right_job):
            calls.append(1)
            return (left_job.creation > right_job.creation) - (left_job.creation < right_job.creation) or None

    snap = kt.cluster(nodes=[kt.node("n", gpus=1)], queues=queues, jobs=jobs)
    session = Session(snap, kt.plugin_manager(["mine"], extra_plugins={"mine": lambda a: CountingOrder()})).open()
    jq = JobQueue(session, list(session.jobs.values()))
    order = [jq.pop() for _ in range(64 * 3)]
    assert [j.name for j in order[:3]] == ["j0-0", "j1-0", "j2-0"]  # ties on creation: by queue creation
    assert [j.creation for j in order] == sorted(j.creation for j in order)
    assert jq.pop() is None
    # The first pop plays 63 matches; every later one the 6 on one path (a linear scan would play 63).
    assert len(calls) <= 63 + 6 * (64 * 3 - 1)


def test_an_arrival_makes_every_queue_compared_again():
    class FavoursArrivals:
        """Puts first the queue of the last job that arrived in the session."""

        favourite = None

        @hookimpl
        def kai_session_job_added(self, job):
            self.favourite = job.queue

        @hookimpl
        def kai_queue_order(self, left, right):
            if self.favourite in (left.name, right.name) and left.name != right.name:
                return -1 if left.name == self.favourite else 1
            return None

    plugin = FavoursArrivals()
    names = ("qa", "qb", "qc", "qd")
    snap = kt.cluster(queues=[kt.queue(q, creation=float(k)) for k, q in enumerate(names)],
                      jobs=[kt.job(f"{q}{k}", queue=q, gpus=1) for q in names for k in range(3)])
    session = Session(snap, kt.plugin_manager(["mine"], extra_plugins={"mine": lambda a: plugin})).open()
    jq = JobQueue(session, list(session.jobs.values()))
    assert jq.pop().queue == "qa"
    arrival = kt.job("late", queue="qd", gpus=1)  # its match with qc was not played again by the pop from qa
    assert not session.add_job(Job(arrival.name, "qd", tasks=arrival.tasks, uid="default/late"))
    assert [jq.pop().queue for _ in range(3)] == ["qd", "qd", "qd"]


def test_a_withdrawn_queue_order_leaves_the_fallback():
    class Reversed:
        @hookimpl
        def kai_queue_order(self, left, right):
            return -1 if left.name > right.name else 1

    plugins = kt.plugin_manager(["mine"], extra_plugins={"mine": lambda a: Reversed()})
    snap = kt.cluster(queues=[kt.queue("qa", creation=1.0), kt.queue("qb", creation=2.0)],
                      jobs=[kt.job(f"{q}{k}", queue=q) for q in ("qa", "qb") for k in range(2)])
    session = Session(snap, plugins).open()
    jq = JobQueue(session, list(session.jobs.values()))
    assert jq.pop().queue == "qb"
    session.calls.withdraw(plugins.pm.get_plugin("mine"))
    assert jq.pop().queue == "qa"
