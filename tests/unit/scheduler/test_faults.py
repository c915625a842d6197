"""Vanished and inconsistent objects in the live scheduler, internal errors on the cluster, and the loop's
backoff after failed cycles."""

from __future__ import annotations

import gc
import threading
import types

import pytest

from kai import hookimpl
from kai import testing as kt
from kai.api import TaskStatus
from kai.framework import DEFAULT_CONFIG
from kai.framework.faults import SessionOpenError
from kai.metrics import Registry, SchedulerMetrics
from kai.scheduler.cache import ClusterCache
from kai.scheduler.commit import Committer
from kai.scheduler.loop import GC_MIDDLE_THRESHOLD, GC_YOUNG_THRESHOLD, RECENT_CYCLES, Scheduler, backoff
from support.kube import FakeApi

from .test_commit import RecordingKube


def node(name, gpus=8):
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc,
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, group="g", gpus=1, node_name="", phase="Pending"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": node_name,
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def podgroup(name="g"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"},
            "spec": {"queue": "q", "minMember": 1}}


def bind(pod_name, node_name, phase=""):
    return {"metadata": {"name": pod_name, "namespace": "ns",
                         "ownerReferences": [{"kind": "Pod", "uid": f"uid-{pod_name}"}]},
            "spec": {"podName": pod_name, "selectedNode": node_name}, "status": {"phase": phase}}


def cache_with(kube=None, **objects) -> ClusterCache:
    """A cache whose stores hold node n1 (8 GPUs), queue q and ``objects``."""
    cache = ClusterCache(kube)
    objects = {"nodes": [node("n1")], "queues": [{"metadata": {"name": "q"}, "spec": {"resources": {
        "gpu": {"quota": 0, "limit": -1}}}}], **objects}
    for name, informer in cache.informers.items():
        informer._replace(objects.get(name, []), "1")
    return cache


def _cycle(cache):
    return cache.snapshot(now=1000.0)


def _commit(kube, cache, committer=None, session_of=lambda snap: kt.run(snap)):
    committer = committer or Committer(kube, cache, workers=2)
    cycle = _cycle(cache)
    session = session_of(cycle.snapshot)
    committer.commit(session, cycle)
    assert committer.flush(10)
    return committer, session


def _events(kube, reason):
    return [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["message"])
            for e in kube.of("POST", "/events") if e["reason"] == reason]


# --- the cache: placements on nodes that are gone ----------------------------------------------------


def test_an_assumed_binding_to_a_node_deleted_since_is_dropped_and_reported():
    cache = cache_with(podgroups=[podgroup()], pods=[pod("p")])
    cache.assume_bound(cache.informers["pods"].get("ns/p"), "n9")
    snap = _cycle(cache).snapshot
    task = snap.jobs["ns/g"].tasks["p"]
    assert (task.status, task.node) == (TaskStatus.PENDING, None)
    assert [(p.kind, p.name, p.reason) for p in snap.problems] == [("task", "ns/p", "NodeNotFound")]
    assert "being bound to node 'n9', which no longer exists" in snap.problems[0].message


def test_a_bind_request_to_a_missing_node_is_stale_and_reported_once_for_its_pod():
    cache = cache_with(podgroups=[podgroup()], pods=[pod("p"), pod("ran", node_name="n9", phase="Running")],
                       bindrequests=[bind("p", "n9"), bind("ran", "n9", phase="Succeeded")])
    cache.assume_bound(cache.informers["pods"].get("ns/p"), "n9")  # its own write, not yet confirmed
    cycle = _cycle(cache)
    assert sorted(b.name for b in cycle.stale_bind_requests) == ["p", "ran"]
    assert cycle.snapshot.jobs["ns/g"].tasks["p"].status is TaskStatus.PENDING
    assert sorted((p.name, p.message.split(",")[0]) for p in cycle.snapshot.problems) == [
        ("ns/p", "BindRequest ns/p selects node 'n9'"),
        ("ns/ran", "task is Running on node 'n9'")]
    assert cycle.snapshot.nodes[0].allocatable.gpu == 8.0  # nothing counted anywhere


# --- the committer: reports ---------------------------------------------------------------------------


def test_a_pod_on_a_deleted_node_gets_one_event_not_one_per_cycle():
    kube = RecordingKube()
    running = pod("ran", node_name="gone", phase="Running")
    cache = cache_with(kube, pods=[running], podgroups=[podgroup()])
    committer, session = _commit(kube, cache)
    _commit(kube, cache, committer)
    [(kind, name, message)] = _events(kube, "NodeNotFound")
    assert (kind, name) == ("Pod", "ran")
    assert message.startswith("task is Running on node 'gone', which does not exist")
    assert session.errors == [] and session.decisions == []


def test_an_overcommitted_node_gets_one_event():
    kube = RecordingKube()
    big = [pod(f"big{i}", gpus=4, node_name="n1", phase="Running") for i in range(3)]  # 12 GPUs on 8
    cache = cache_with(kube, pods=big, podgroups=[podgroup()])
    committer, _ = _commit(kube, cache)
    _commit(kube, cache, committer)
    assert _events(kube, "NodeOverCommitted") == [
        ("Node", "n1", "Node n1: the pods placed on the node ask more than it has (GPUs 12 of 8); "
                       "no new pod is placed on it until it has room")]


class Boom:
    @hookimpl
    def kai_predicate(self, task, job, node):
        if job.name == "x":
            raise RuntimeError("predicate broke")


def test_an_internal_error_gives_the_podgroup_an_event_and_a_condition_and_the_others_are_placed():
    kube = RecordingKube()
    cache = cache_with(kube, pods=[pod("x0", group="x"), pod("y0", group="y")],
                          podgroups=[podgroup("x"), podgroup("y")])
    session_of = lambda snap: kt.run(snap, plugins=[*DEFAULT_CONFIG.plugins, "boom"],  # noqa: E731
                                     extra_plugins={"boom": lambda a: Boom()})
    _commit(kube, cache, session_of=session_of)
    [body] = kube.of("POST", "/binding")
    assert body["metadata"]["name"] == "y0"
    message = "Internal error while scheduling the podgroup in action allocate: RuntimeError: predicate broke"
    assert _events(kube, "InternalSchedulingError") == [
        ("PodGroup", "x", f"{message} (the scheduler's log has the details)")]
    [status] = kube.of("PATCH", "/podgroups/x/status")
    condition = status["status"]["schedulingConditions"][0]
    assert condition["message"] == f"InternalSchedulingError: {message}."
    assert condition["reasons"] == [{"reason": "InternalSchedulingError", "message": message}]


# --- the loop: failed cycles back off -------------------------------------------------------------------


def test_backoff_doubles_from_a_period_up_to_its_cap():
    assert [backoff(n, 1.0) for n in (1, 2, 3, 5, 6, 7, 1000)] == [1.0, 2.0, 4.0, 16.0, 30.0, 30.0, 30.0]
    assert [backoff(n, 0.1) for n in (1, 2)] == [0.1, 0.2]
    assert backoff(3, 60.0) == 60.0  # a period longer than the cap is never shortened


class CountingStop(threading.Event):
    """A stop event whose waits return at once, recording how long the loop asked to wait."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.waits = after, []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if len(self.waits) >= self.after:
            self.set()
        return self.is_set()


@pytest.fixture
def scheduler(monkeypatch):
    registry = Registry()
    s = Scheduler(FakeApi(), period=1.0, metrics=SchedulerMetrics(registry))
    monkeypatch.setattr(s.cache, "start", lambda: s.cache)
    monkeypatch.setattr(s.cache, "stop", lambda: None)
    monkeypatch.setattr(s, "_wait_synced", lambda stop: True)
    s.registry = registry
    return s


def test_failing_cycles_are_retried_after_a_growing_backoff_and_counted(scheduler, monkeypatch):
    attempts = []

    def failing():
        attempts.append(1)
        scheduler.cache.changed.set()  # a change waits each time: it must not cut the backoff short
        raise RuntimeError("cycle broke")

    monkeypatch.setattr(scheduler, "run_once", failing)
    stop = CountingStop(after=7)
    scheduler.run(stop)
    assert len(attempts) == 7
    assert stop.waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert scheduler.registry.value("kai_scheduler_cycle_failures_total") == 7


def test_a_successful_cycle_resets_the_backoff(scheduler, monkeypatch):
    outcomes = iter([RuntimeError("once"), RuntimeError("twice"), None])

    def run_once():
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        stop.set()
        return types.SimpleNamespace(decisions=[])  # a cycle that decided nothing

    monkeypatch.setattr(scheduler, "run_once", run_once)
    stop = CountingStop(after=100)
    scheduler.run(stop)
    assert stop.waits == [1.0, 2.0]
    assert scheduler.failures == 0


def test_a_plugin_failing_to_open_the_session_fails_the_cycle_and_contained_errors_are_counted(scheduler):
    class BadOpen:
        @hookimpl
        def kai_session_open(self, session):
            raise KeyError("state")

    scheduler.plugins = kt.plugin_manager(["bad"], extra_plugins={"bad": lambda a: BadOpen()})
    with pytest.raises(SessionOpenError, match="plugin 'bad' failed to open the session"):
        scheduler.run_once()
    scheduler.plugins = kt.plugin_manager([*DEFAULT_CONFIG.plugins, "boom"], actions=("allocate",),
                                          extra_plugins={"boom": lambda a: Boom()})
    kube = RecordingKube()
    scheduler.cache = cache_with(kube, pods=[pod("x0", group="x")], podgroups=[podgroup("x")])
    scheduler.committer = Committer(kube, scheduler.cache, workers=2)
    session = scheduler.run_once()
    assert scheduler.committer.flush(10)
    assert _events(kube, "InternalSchedulingError")
    assert [e.job for e in session.errors] == ["ns/x"]
    assert scheduler.registry.value("kai_scheduler_contained_errors_total", {"action": "allocate"}) == 1


def test_a_decision_that_cannot_be_written_leaves_the_others(monkeypatch):
    kube = RecordingKube()
    cache = cache_with(kube, pods=[pod("a0", group="a"), pod("b0", group="b")], podgroups=[podgroup("a"),
                                                                                           podgroup("b")])
    committer = Committer(kube, cache, workers=2)
    real = committer._bind

    def bind_but_a(pod_view, *args):
        if pod_view.name == "a0":
            raise ValueError("cannot build the Binding")
        real(pod_view, *args)

    monkeypatch.setattr(committer, "_bind", bind_but_a)
    _commit(kube, cache, committer)
    assert [b["metadata"]["name"] for b in kube.of("POST", "/binding")] == ["b0"]


def test_failing_metrics_bookkeeping_still_commits_the_cycle_s_decisions(scheduler, monkeypatch):
    kube = RecordingKube()
    scheduler.cache = cache_with(kube, pods=[pod("a0", group="a")], podgroups=[podgroup("a")])
    scheduler.committer = Committer(kube, scheduler.cache, workers=2)
    monkeypatch.setattr(scheduler.metrics, "fair_shares", lambda *a: 1 / 0)
    monkeypatch.setattr(scheduler.metrics, "contained_error", lambda *a: 1 / 0)
    session = scheduler.run_once()
    assert scheduler.committer.flush(10)
    assert [d.kind for d in session.decisions] == ["bind"]
    assert kube.of("POST", "/binding")


def test_cycles_are_counted_by_whether_they_decided_something(scheduler):
    kube = RecordingKube()
    scheduler.cache = cache_with(kube, pods=[pod("a0")], podgroups=[podgroup()])
    scheduler.committer = Committer(kube, scheduler.cache, workers=2)
    assert [d.kind for d in scheduler.run_once().decisions] == ["bind"]
    assert scheduler.run_once().decisions == []  # the binding is assumed: nothing left to decide
    assert scheduler.committer.flush(10)
    assert scheduler.registry.value("kai_scheduler_cycles_total", {"decided": "true"}) == 1
    assert scheduler.registry.value("kai_scheduler_cycles_total", {"decided": "false"}) == 1


def test_the_last_cycles_are_kept_in_brief_failed_ones_with_their_error(scheduler, monkeypatch):
    kube = RecordingKube()
    scheduler.cache = cache_with(kube, pods=[pod("a0")], podgroups=[podgroup()])
    scheduler.committer = Committer(kube, scheduler.cache, workers=2)
    scheduler.run_once()
    scheduler.run_once()
    assert scheduler.committer.flush(10)
    first, second = scheduler.recent
    assert (first.cycle, first.binds, first.evictions, first.jobs, first.nodes) == (1, 1, 0, 1, 1)
    assert (second.cycle, second.binds) == (2, 0)
    assert first.started <= second.started and first.seconds > 0

    def failing():
        raise RuntimeError("cycle\nbroke")

    monkeypatch.setattr(scheduler, "run_once", failing)
    scheduler.run(CountingStop(after=RECENT_CYCLES))
    assert len(scheduler.recent) == RECENT_CYCLES
    assert scheduler.recent[-1].cycle is None and scheduler.recent[-1].error == "cycle\\nbroke"


def test_a_running_scheduler_collects_the_young_generations_less_often(scheduler, monkeypatch):
    before = gc.get_threshold()
    monkeypatch.setattr(gc, "freeze", lambda: None)  # the test process's objects stay collectable
    stop, during = threading.Event(), []

    def run_once():
        during.append(gc.get_threshold())
        stop.set()
        return types.SimpleNamespace(decisions=[])

    monkeypatch.setattr(scheduler, "run_once", run_once)
    scheduler.run(stop)
    assert during == [(GC_YOUNG_THRESHOLD, GC_MIDDLE_THRESHOLD, before[2])]
    assert GC_YOUNG_THRESHOLD > before[0] and GC_MIDDLE_THRESHOLD > before[1]
    assert gc.get_threshold() == before  # given back on stop
