"""The ``elastic`` job order follows every placement and eviction, and a failed step, while each job's
state is worked out once between moves."""

import functools

from kai import testing as kt
from kai.api import Job, TaskStatus
from kai.framework import Session


def _session(*more: Job) -> Session:
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)],
                      jobs=[kt.job("a", "q", tasks=2, gpus=1, min_available=2, creation=1.0),
                            kt.job("b", "q", tasks=2, gpus=1, min_available=1, creation=2.0, status="Running",
                                   node="n1"), *more])
    return Session(snap, kt.plugin_manager(["elastic"], actions=())).open()


def _first(session: Session) -> str:
    a, b = session.jobs["default/a"], session.jobs["default/b"]
    return "a" if session.compare_jobs(a, b) < 0 else "b"


def test_order_follows_placements_and_evictions():
    session = _session()
    a, b = session.jobs["default/a"], session.jobs["default/b"]
    assert _first(session) == "a"  # a below its gang size, b above it
    stmt = session.statement()
    for task in a.tasks.values():
        stmt.allocate(task, "n1")
    assert _first(session) == "a"  # a at its gang size, b above it
    stmt.evict(b.tasks["b-0"], "")
    assert _first(session) == "a"  # both at their gang size: the older first
    stmt.evict(b.tasks["b-1"], "")
    assert _first(session) == "b"  # b below its gang size
    stmt.discard()
    assert _first(session) == "a"


def test_a_failed_step_forgets_the_states():
    session = _session()
    assert _first(session) == "a"
    # a step that changed tasks without the allocation events, then failed and was recorded
    for task in session.jobs["default/a"].tasks.values():
        task.status = TaskStatus.RUNNING
    for task in session.jobs["default/b"].tasks.values():
        task.status = TaskStatus.PENDING
    assert _first(session) == "a"  # nothing told the plugin yet
    session.contain(RuntimeError("boom"), "allocate", None)
    assert _first(session) == "b"


def test_a_sort_works_each_state_out_once(monkeypatch):
    session = _session(*[kt.job(f"c{i}", "q", tasks=1, gpus=1, creation=3.0 + i) for i in range(6)])
    calls = []
    state = Job.elastic_state

    def counted(job):
        calls.append(job.name)
        return state(job)

    monkeypatch.setattr(Job, "elastic_state", counted)
    jobs = list(session.jobs.values())
    ordered = sorted(jobs, key=functools.cmp_to_key(session.compare_jobs))
    assert [j.name for j in ordered][:2] == ["a", "c0"] and ordered[-1].name == "b"
    assert sorted(calls) == sorted(j.name for j in jobs)


def test_a_new_session_over_the_same_jobs_starts_afresh():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)],
                      jobs=[kt.job("a", "q", tasks=2, gpus=1, min_available=2, creation=1.0),
                            kt.job("b", "q", tasks=2, gpus=1, min_available=1, creation=2.0, status="Running",
                                   node="n1")])
    plugins = kt.plugin_manager(["elastic"], actions=())
    first = Session(snap, plugins).open()
    assert _first(first) == "a"
    first.close()
    for task in snap.jobs["default/b"].tasks.values():  # the next cycle's facts: b's pods are gone
        task.status, task.node = TaskStatus.PENDING, None
    for task in snap.jobs["default/a"].tasks.values():
        task.status, task.node = TaskStatus.RUNNING, "n1"
    assert _first(Session(snap, plugins).open()) == "b"
