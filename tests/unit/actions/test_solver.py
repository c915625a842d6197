"""Pieces of the job solver: statements that un-evict and move victims, eviction steps of victim jobs,
the idle-GPU scenario filter and the victim stream."""

from kai import testing as kt
from kai.actions.eviction import victim_queue
from kai.actions.victims import IdleGpus, NodeAffinities, VictimStream
from kai.api import TaskStatus
from kai.framework import Session
from kai.framework.gang import tasks_to_evict

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder"]


def _session(*jobs, gpus=(4, 4)):
    snap = kt.cluster(nodes=[kt.node(f"n{i + 1}", gpus=g) for i, g in enumerate(gpus)],
                      queues=[kt.queue("q", deserved_gpus=8)], jobs=list(jobs))
    return Session(snap, kt.plugin_manager(PLUGINS, actions=())).open()


def _amounts(session):
    a = session.arrays
    return [list(a.idle_gpu), list(a.rel_gpu), list(a.idle_pods), list(a.rel_pods)]


def test_pipelining_an_evicted_task_back_onto_its_node_un_evicts_it():
    session = _session(kt.job("v", "q", gpus=2, status="Running", node="n1"))
    task = session.jobs["default/v"].tasks["v-0"]
    before = _amounts(session)
    stmt = session.statement()
    stmt.evict(task, "make room")
    assert task.status is TaskStatus.RELEASING and task.uid in session.evicted
    stmt.pipeline(task, "n1")
    assert task.status is TaskStatus.RUNNING and task.uid not in session.evicted
    assert _amounts(session) == before
    assert stmt.commit() == []


def test_moving_an_evicted_task_keeps_its_old_node_releasing_until_rolled_back():
    session = _session(kt.job("v", "q", gpus=2, status="Running", node="n1"))
    task = session.jobs["default/v"].tasks["v-0"]
    before = _amounts(session)
    stmt = session.statement()
    stmt.evict(task, "make room")
    stmt.pipeline(task, "n2")
    idle, rel, _, _ = _amounts(session)
    assert (idle[0], rel[0]) == (2.0, 2.0)  # the pod still terminates on n1
    assert (idle[1], rel[1]) == (4.0, -2.0)  # and reserves n2's releasing amount
    stmt.rollback(0)
    assert _amounts(session) == before and task.status is TaskStatus.RUNNING and session.evicted == set()


def test_a_moved_task_commits_as_an_eviction_and_a_pipeline():
    session = _session(kt.job("v", "q", gpus=2, status="Running", node="n1"))
    task = session.jobs["default/v"].tasks["v-0"]
    stmt = session.statement()
    stmt.evict(task, "make room")
    stmt.pipeline(task, "n2")
    assert [(d.kind, d.node, d.message) for d in stmt.commit()] == [("evict", "n1", "make room"),
                                                                     ("pipeline", "n2", "")]


def test_tasks_to_evict_shrinks_elastic_jobs_one_task_at_a_time_then_takes_the_rest():
    session = _session(kt.job("e", "q", tasks=4, gpus=1, min_available=2, status="Running", node="n1"))
    job = session.jobs["default/e"]
    tasks, more = tasks_to_evict(session, job)
    assert [t.name for t in tasks] == ["e-3"] and more
    stmt = session.statement()
    stmt.evict(tasks[0], "")
    tasks, more = tasks_to_evict(session, job)
    assert [t.name for t in tasks] == ["e-2"] and more
    stmt.evict(tasks[0], "")
    tasks, more = tasks_to_evict(session, job)
    assert sorted(t.name for t in tasks) == ["e-0", "e-1"] and not more


def test_idle_gpu_filter_counts_freed_gpus_node_by_node():
    session = _session(kt.job("a", "q", tasks=4, gpus=1, min_available=1, status="Running", node="n1"),
                       kt.job("b", "q", tasks=3, gpus=1, min_available=1, status="Running", node="n2"),
                       kt.job("want", "q", tasks=2, gpus=2))
    a, b = session.jobs["default/a"], session.jobs["default/b"]
    idle = IdleGpus(session, list(session.jobs["default/want"].tasks.values()))
    assert not idle.passes([])  # n2 has 1 idle GPU, n1 none
    assert not idle.passes([a.tasks["a-0"]])  # n1: 1, n2: 1
    assert not idle.passes([b.tasks["b-0"]])  # n2: 2 -- one task fits
    assert idle.passes([a.tasks["a-1"]])  # n1: 2 -- both fit


def test_victim_stream_replays_whole_jobs_and_skips_recorded_ones():
    session = _session(*[kt.job(f"v{i}", "q", gpus=1, priority=5, status="Running", node="n1", creation=float(i))
                         for i in range(3)])
    stream = VictimStream(session, victim_queue(session, session.jobs.values()))
    assert [g.name for g in stream.groups(set())] == ["v2", "v1", "v0"]
    assert stream.replayable
    assert [g.name for g in stream.groups({"default/v1-0"})] == ["v2", "v0"]


def test_victim_stream_gives_what_is_left_of_an_elastic_job_back_to_the_queue():
    session = _session(kt.job("e", "q", tasks=3, gpus=1, min_available=1, priority=5, status="Running", node="n1"))
    stream = VictimStream(session, victim_queue(session, session.jobs.values()))
    groups = [sorted(t.name for t in g.tasks.values()) for g in stream.groups(set())]
    assert groups == [["e-2"], ["e-1"], ["e-0"]]
    assert not stream.replayable
    assert [sorted(t.name for t in g.tasks.values()) for g in stream.groups({"default/e-2"})] == [["e-1"], ["e-0"]]


def test_node_affinity_filter_waits_for_a_victim_on_a_matching_node():
    snap = kt.cluster(nodes=[kt.node("a", gpus=1, labels={"zone": "a"}), kt.node("b", gpus=1, labels={"zone": "b"})],
                      queues=[kt.queue("q", deserved_gpus=2)],
                      jobs=[kt.job("on-a", "q", gpus=1, status="Running", node="a"),
                            kt.job("on-b", "q", gpus=1, status="Running", node="b"),
                            kt.job("want", "q", gpus=1, node_selector={"zone": "b"})])
    session = Session(snap, kt.plugin_manager(PLUGINS, actions=())).open()
    (task,) = session.jobs["default/want"].tasks.values()
    filt = NodeAffinities(session, [task], set())
    assert not filt.passes(session.jobs["default/on-a"].tasks.values())
    assert filt.passes(session.jobs["default/on-b"].tasks.values())
    assert NodeAffinities(session, [task], {"b"}).passes([])
