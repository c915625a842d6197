"""The committer's writes for one cycle, against a client that records requests (and fails on demand).

The end-to-end tests run the same code against a real API server; these reach the failure paths.
"""

from __future__ import annotations

import json
import threading

from kai import testing as kt
from kai.api import Reservation, TaskStatus
from kai.framework import Decision
from kai.kube.views import parse_reservation
from kai.scheduler.bindmode import BIND_REQUEST, DIRECT
from kai.scheduler.cache import ClusterCache
from kai.scheduler.commit import Committer
from kai.scheduler.views import disruption_budget_view
from kai.scheduler.visibility import build_view
from support.kube import FakeApi


class RecordingKube(FakeApi):
    """Accepts every request (replying ``{}``) but those of ``fail``: (method, path suffix) -> HTTP status."""

    def __init__(self, fail: dict[tuple[str, str], int] | None = None) -> None:
        super().__init__()
        for (method, suffix), status in (fail or {}).items():
            self.fail(status, "refused", method, suffix, times=None)

    def serve(self, method, path, query, body, content_type):
        return {}

    def of(self, method, suffix):
        return [body for m, path, body in self.calls if m == method and path.endswith(suffix)]


def node(name, gpus=8):
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc,
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, group, gpus=1):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": "kai-scheduler",
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Pending"}}


def podgroup(name, queue="q", min_member=1):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"},
            "spec": {"queue": queue, "minMember": min_member}}


def cache_for(kube, pods, podgroups, gpu_limit=-1):
    """A cache whose stores hold node n1 (8 GPUs), queue q, and ``pods`` and ``podgroups``."""
    cache = ClusterCache(kube)
    data = {"nodes": [node("n1")], "queues": [{"metadata": {"name": "q"}, "spec": {"resources": {
        "gpu": {"quota": 0, "limit": gpu_limit}}}}], "pods": pods, "podgroups": podgroups}
    for name, informer in cache.informers.items():
        informer._replace(data.get(name, []), "1")
    return cache


def commit_once(kube, cache, committer=None, bind_mode=DIRECT):
    committer = committer or Committer(kube, cache, workers=2, bind_mode=bind_mode)
    c = cache.snapshot(now=1000.0)
    session = kt.run(c.snapshot)
    committer.commit(session, c)
    return committer, session


def wait(committer):
    assert committer.flush(10)


def test_bind_creates_a_bind_request_and_a_scheduled_event_and_assumes_it():
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    committer, session = commit_once(kube, cache, bind_mode=BIND_REQUEST)
    wait(committer)
    (body,) = kube.of("POST", "/bindrequests")
    assert body["metadata"]["name"] == "p" and body["spec"]["selectedNode"] == "n1"
    assert [e["reason"] for e in kube.of("POST", "/events")] == ["Scheduled"]
    assert not kube.of("POST", "/binding")
    _, again = commit_once(kube, cache, bind_mode=BIND_REQUEST)
    assert again.jobs["ns/g"].tasks["p"].status is TaskStatus.BINDING and not again.decisions


def test_a_plain_pod_is_bound_directly_with_the_binders_annotations_then_the_scheduled_event():
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    committer, session = commit_once(kube, cache)
    wait(committer)
    assert kube.of("POST", "/bindrequests") == []
    (body,) = kube.of("POST", "/pods/p/binding")
    assert body == {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p",
                                 "annotations": {"received-resource-type": "Regular"}},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    writes = [(m, p.rsplit("/", 1)[-1]) for m, p, _ in kube.calls if m != "GET"]
    assert sorted(writes) == [("PATCH", "g"), ("POST", "binding"), ("POST", "events")]  # the last start, once a group
    assert writes.index(("POST", "binding")) < writes.index(("POST", "events"))
    assert [e["reason"] for e in kube.of("POST", "/events")] == ["Scheduled"]
    _, again = commit_once(kube, cache)
    assert again.jobs["ns/g"].tasks["p"].status is TaskStatus.BINDING and not again.decisions


class HeldBindings(RecordingKube):
    """Holds every Binding until ``release`` is set; counts the explanations (events, conditions) running at once
    meanwhile, and the writes done by then."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.held = threading.Semaphore(0)
        self.running = self.most_while_held = 0
        self.counting = threading.Lock()
        self.while_held: list[tuple[str, str]] = []

    def request(self, method, path, query=None, body=None, content_type="application/json", timeout=None):
        if path.endswith("/binding"):
            self.held.release()
            self.release.wait(10)
            return super().request(method, path, query, body, content_type, timeout)
        explains = path.endswith(("/events", "/status"))
        with self.counting:
            self.running += explains
            if not self.release.is_set():
                self.most_while_held = max(self.most_while_held, self.running)
        try:
            threading.Event().wait(0.02)  # long enough for another worker to overlap
            return super().request(method, path, query, body, content_type, timeout)
        finally:
            with self.counting:
                self.running -= explains
                if not self.release.is_set():
                    self.while_held.append((method, path))


def test_while_bindings_are_under_way_explanations_go_one_at_a_time_and_the_podgroups_times_go_with_them():
    kube = HeldBindings()
    groups = [f"g{i}" for i in range(6)]
    waiting = [f"w{i}" for i in range(4)]  # 16 GPUs each: no node has them
    cache = cache_for(kube, [pod(f"p{i}", g) for i, g in enumerate(groups)] + [pod(w, w, gpus=16) for w in waiting],
                      [podgroup(g) for g in groups + waiting])
    committer = Committer(kube, cache, workers=8)  # 4 workers for the explanations
    c = cache.snapshot(now=1000.0)
    committer.commit(kt.run(c.snapshot), c)
    for _ in groups:
        assert kube.held.acquire(timeout=10)  # every Binding is under way
    threading.Event().wait(0.3)
    assert kube.most_while_held == 1
    assert sum(path.endswith("/events") for _, path in kube.while_held) >= 2
    assert sorted(p for m, p in kube.while_held if m == "PATCH" and p.rsplit("/", 1)[-1] in groups) == [
        f"/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/{g}" for g in groups]  # the last starts
    kube.release.set()
    wait(committer)
    assert len(kube.of("POST", "/binding")) == 6
    assert sum(e["reason"] == "Scheduled" for e in kube.of("POST", "/events")) == 6


def test_reports_beyond_the_limit_are_dropped_and_written_by_later_cycles_once():
    kube = RecordingKube()
    waiting = [f"w{i}" for i in range(5)]  # 16 GPUs each: no node has them
    cache = cache_for(kube, [pod(w, w, gpus=16) for w in waiting], [podgroup(w) for w in waiting])
    committer = Committer(kube, cache, workers=2, report_limit=3)
    wait(commit_once(kube, cache, committer)[0])
    assert committer.dropped > 0  # five jobs' explanations, submitted at once, do not fit in three places
    for _ in range(20):  # each cycle writes some of what was dropped, and nothing twice
        dropped = committer.dropped
        wait(commit_once(kube, cache, committer)[0])
        if committer.dropped == dropped:
            break
    events = sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in kube.of("POST", "/events"))
    assert events == sorted((kind, w) for w in waiting for kind in ("Pod", "PodGroup"))
    assert sorted(p.split("/")[-2] for p in (path for m, path, _ in kube.calls if path.endswith("/status"))) == \
        sorted(waiting * 2)  # each pod's condition and each PodGroup's


def test_existing_bind_request_is_not_a_failure_and_a_refused_one_is_retried():
    kube = RecordingKube(fail={("POST", "/bindrequests"): 409})
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    wait(commit_once(kube, cache, bind_mode=BIND_REQUEST)[0])
    assert not kube.of("POST", "/events")  # neither Scheduled nor FailedBinding
    assert commit_once(kube, cache, bind_mode=BIND_REQUEST)[1].jobs["ns/g"].tasks["p"].status is TaskStatus.BINDING

    kube = RecordingKube(fail={("POST", "/bindrequests"): 403})
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    wait(commit_once(kube, cache, bind_mode=BIND_REQUEST)[0])
    event = kube.of("POST", "/events")[0]
    assert event["reason"] == "FailedBinding" and event["message"].startswith("Failed to bind pod ns/p to node n1.")
    assert [d.kind for d in commit_once(kube, cache)[1].decisions] == ["bind"]  # placed again


def test_a_binding_refused_for_a_pod_gone_or_refused_is_dropped_and_the_pod_placed_again():
    kube = RecordingKube(fail={("POST", "/binding"): 404})  # gone: no event
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    wait(commit_once(kube, cache)[0])
    assert not kube.of("POST", "/events")
    # the cache does not believe it bound: the watch alone tells where the pod is (here still pending)
    assert [d.kind for d in commit_once(kube, cache)[1].decisions] == ["bind"]

    kube = RecordingKube(fail={("POST", "/binding"): 403})
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    wait(commit_once(kube, cache)[0])
    [event] = kube.of("POST", "/events")
    assert event["reason"] == "FailedBinding" and event["message"].startswith("Failed to bind pod ns/p to node n1.")
    assert [d.kind for d in commit_once(kube, cache)[1].decisions] == ["bind"]


def test_a_pod_bound_already_is_not_placed_again_until_the_watch_shows_where():
    kube = RecordingKube(fail={("POST", "/binding"): 409})  # bound by an earlier attempt, or replaced
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    wait(commit_once(kube, cache)[0])
    assert not kube.of("POST", "/events")
    assert commit_once(kube, cache)[1].jobs["ns/g"].tasks["p"].status is TaskStatus.BINDING


def test_a_binding_without_an_answer_is_held_if_the_pod_shows_its_node_else_placed_again():
    class Bound(RecordingKube):
        def serve(self, method, path, query, body, content_type):
            return {"spec": {"nodeName": "n1"}} if method == "GET" else {}

    for kube, held in ((Bound(), True), (RecordingKube(), False)):
        kube.fail(0, "connection reset", "POST", "/binding", times=None)
        kube.fail(0, "connection refused", "GET", "/pods/p", times=1)  # read again while the server is away
        cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
        wait(commit_once(kube, cache)[0])
        assert ("GET", "/api/v1/namespaces/ns/pods/p") in [(m, p) for m, p, _ in kube.calls]
        assert [e["reason"] for e in kube.of("POST", "/events")] == ([] if held else ["FailedBinding"])
        assert [d.kind for d in commit_once(kube, cache)[1].decisions] == ([] if held else ["bind"])


def test_unchanged_explanations_are_written_once():
    kube = RecordingKube()
    cache = cache_for(kube, [pod(f"p{i}", "gang", gpus=6) for i in range(2)], [podgroup("gang", min_member=2)])
    committer, _ = commit_once(kube, cache)
    commit_once(kube, cache, committer)
    wait(committer)
    reasons = sorted((e["involvedObject"]["kind"], e["reason"]) for e in kube.of("POST", "/events"))
    assert reasons == [("Pod", "Unschedulable"), ("Pod", "Unschedulable"), ("PodGroup", "Unschedulable")]
    (status,) = kube.of("PATCH", "/podgroups/gang/status")
    condition = status["status"]["schedulingConditions"][0]
    assert condition["type"] == "UnschedulableOnNodePool" and condition["transitionID"] == "0"
    assert condition["message"].startswith("PodSchedulingErrors: Resources were found for 1 pods while 2 are required")
    assert len(kube.of("PATCH", "/pods/p0/status")) == 1


def test_a_failed_explanation_is_written_again_next_cycle():
    kube = RecordingKube(fail={("PATCH", "/podgroups/gang/status"): 500})
    cache = cache_for(kube, [pod(f"p{i}", "gang", gpus=6) for i in range(2)], [podgroup("gang", min_member=2)])
    committer, _ = commit_once(kube, cache)
    wait(committer)
    commit_once(kube, cache, committer)
    wait(committer)
    assert len(kube.of("PATCH", "/podgroups/gang/status")) == 2
    assert len(kube.of("POST", "/events")) == 3  # the events succeeded: not repeated


def test_a_waiting_job_the_session_leaves_alone_is_explained_again_from_a_following_snapshot():
    kube = RecordingKube(fail={("PATCH", "/podgroups/g/status"): 500})  # never written: tried again every cycle
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")], gpu_limit=0)  # vetoed before a task moves
    committer, _ = commit_once(kube, cache)
    wait(committer)
    first = cache.snapshot(now=1000.0)
    cache.informers["podgroups"]._replace([podgroup("g"), podgroup("other")], "2")  # a new snapshot takes g over
    committer, session = commit_once(kube, cache, committer)
    wait(committer)
    assert session.snapshot is not first.snapshot and session.jobs["ns/g"] is first.snapshot.jobs["ns/g"]
    assert "ns/g" not in {job.uid for job, _ in session.journal.jobs.values()}
    assert len(kube.of("PATCH", "/podgroups/g/status")) == 2


def test_unknown_queue_is_explained_on_the_pods_and_the_podgroup():
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "lost")], [podgroup("lost", queue="nope")])
    wait(commit_once(kube, cache)[0])
    assert {(e["involvedObject"]["kind"], e["message"]) for e in kube.of("POST", "/events")} == {
        ("Pod", "Queue 'nope' does not exist"), ("PodGroup", "Queue 'nope' does not exist")}
    (status,) = kube.of("PATCH", "/podgroups/lost/status")
    assert status["status"]["schedulingConditions"][0]["reasons"] == [
        {"reason": "QueueDoesNotExist", "message": "Queue 'nope' does not exist"}]


def test_a_malformed_podgroup_field_is_a_warning_event_and_the_pod_is_still_scheduled():
    kube = RecordingKube()
    bad = podgroup("g")
    bad["spec"]["preemptionDelay"] = "soon"
    cache = cache_for(kube, [pod("p", "g")], [bad])
    wait(commit_once(kube, cache)[0])
    assert kube.of("POST", "/pods/p/binding")
    (event,) = [e for e in kube.of("POST", "/events") if e["reason"] == "InvalidPodGroup"]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "PodGroup"
    assert "spec.preemptionDelay" in event["message"]


def test_a_job_that_lost_a_pod_to_an_eviction_gets_the_last_eviction_annotation():
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    committer = Committer(kube, cache, workers=2)
    c = cache.snapshot(now=1000.0)
    session = kt.run(c.snapshot)
    session.jobs["ns/g"].last_eviction = 1_767_225_600.0
    committer.commit(session, c)
    wait(committer)
    patches = [b["metadata"]["annotations"] for b in kube.of("PATCH", "/podgroups/g") if "metadata" in b]
    assert any(a.get("kai.scheduler/last-eviction-timestamp") == "2026-01-01T00:00:00Z" for a in patches)


def test_a_queue_capacity_veto_is_explained_with_kais_reason_and_queue_details():
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g", gpus=2)], [podgroup("g")], gpu_limit=1)
    wait(commit_once(kube, cache)[0])
    (status,) = kube.of("PATCH", "/podgroups/g/status")
    condition = status["status"]["schedulingConditions"][0]
    [reason] = condition["reasons"]
    assert reason["reason"] == "OverLimit"
    assert condition["message"] == f"OverLimit: {reason['message']}."
    details = reason["details"]["queueDetails"]
    assert details["name"] == "q"
    assert details["queueResourceLimits"]["nvidia.com/gpu"] == "1"
    assert details["podGroupRequestedResources"]["nvidia.com/gpu"] == "2"
    assert details["queueAllocatedResources"] == {"cpu": "0", "memory": "0", "nvidia.com/gpu": "0"}


def pending_reasons(kube, path):
    """The ``kai.scheduler/pending-reason`` annotations written to the PodGroup at ``path``, decoded."""
    return [json.loads(a) if a else a for b in kube.of("PATCH", path) if "metadata" in b
            for k, a in b["metadata"]["annotations"].items() if k == "kai.scheduler/pending-reason"]


def test_the_dominant_reason_goes_with_the_events_and_the_condition_as_the_api_serves_it():
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g", gpus=2)], [podgroup("g")], gpu_limit=1)
    committer, session = commit_once(kube, cache)
    commit_once(kube, cache, committer)  # the same outcome: nothing more is written
    wait(committer)
    served = build_view(session, 1, committer.node_pool)
    reason = served.reason(served.find("ns", "g")[2]).to_json()
    expected = {"code": reason["code"], "details": reason["details"]}
    assert expected["code"] == "OverLimit" and expected["details"]["kind"] == "queue-limit"
    assert expected["details"]["queue"] == "q" and expected["details"]["missing"] == 1
    events = kube.of("POST", "/events")
    assert sorted(e["involvedObject"]["kind"] for e in events) == ["Pod", "PodGroup"]
    for event in events:  # KAI's reason and message as they were, the details beside them
        assert event["reason"] == "Unschedulable" and event["message"].startswith("OverLimit")
        assert json.loads(event["metadata"]["annotations"]["kai.scheduler/pending-reason"]) == expected
    assert pending_reasons(kube, "/podgroups/g") == [expected]  # with the condition, once
    assert len(kube.of("PATCH", "/podgroups/g/status")) == len(kube.of("PATCH", "/pods/p/status")) == 1


def test_the_pending_reason_is_taken_off_the_podgroup_once_it_is_placed():
    kube = RecordingKube()
    group = podgroup("g")
    group["metadata"]["annotations"] = {"kai.scheduler/pending-reason": '{"code":"OverLimit"}'}
    cache = cache_for(kube, [pod("p", "g")], [group])
    wait(commit_once(kube, cache)[0])
    assert pending_reasons(kube, "/podgroups/g") == [None]


def test_writes_take_what_they_need_when_queued_so_the_next_cycle_may_rewind_the_snapshot():
    class HeldKube(RecordingKube):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def request(self, method, path, query=None, body=None, **kw):
            assert self.release.wait(10)
            return super().request(method, path, query, body, **kw)

    kube = HeldKube()
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    committer, session = commit_once(kube, cache)  # the writes are queued, none has run
    task = session.jobs["ns/g"].tasks["p"]
    assert task.node == "n1"
    session.snapshot.rewind()  # as the next cycle does, while the writes still wait
    assert (task.status, task.node) == (TaskStatus.PENDING, None)
    kube.release.set()
    wait(committer)
    [body] = kube.of("POST", "/pods/p/binding")
    assert (body["metadata"]["name"], body["target"]["name"]) == ("p", "n1")


def _evict_running_pod(kube):
    """Commit one eviction of the running pod ns/v (PodGroup gv, label app=serve)."""
    running = pod("v", "gv")
    running["metadata"]["labels"] = {"app": "serve"}
    running["spec"]["nodeName"], running["status"]["phase"] = "n1", "Running"
    kube.add("/api/v1/namespaces/ns/pods/v", running)
    cache = cache_for(kube, [running], [podgroup("gv")])
    committer = Committer(kube, cache, workers=2)
    c = cache.snapshot(now=1000.0)
    session = kt.run(c.snapshot, actions=())
    session.decisions.append(Decision("evict", session.jobs["ns/gv"].tasks["v"], "n1", "preempted by ns/urgent"))
    committer.commit(session, c)
    wait(committer)
    return cache


def _budget(allowed):
    return {"metadata": {"name": "serve-pdb", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "serve"}}}, "status": {"disruptionsAllowed": allowed}}


def test_an_eviction_goes_through_the_eviction_api_with_the_pods_uid():
    kube = FakeApi()
    _evict_running_pod(kube)
    (body,) = [b for m, path, b in kube.calls if m == "POST" and path == "/api/v1/namespaces/ns/pods/v/eviction"]
    assert body["kind"] == "Eviction" and body["deleteOptions"] == {"preconditions": {"uid": "uid-v"}}
    assert "/api/v1/namespaces/ns/pods/v" not in kube.objects and not kube.paths("DELETE")
    assert [e["reason"] for e in kube.events] == ["Evict"]


def test_an_eviction_a_budget_refuses_is_reported_naming_the_budget_and_forgotten():
    kube = FakeApi()
    kube.add("/apis/policy/v1/namespaces/ns/poddisruptionbudgets/serve-pdb", _budget(0))
    cache = _evict_running_pod(kube)
    assert "/api/v1/namespaces/ns/pods/v" in kube.objects
    (event,) = kube.events
    assert event["reason"] == "EvictionBlocked" and event["type"] == "Warning"
    assert "ns/v" in event["message"] and "serve-pdb" in event["message"]
    assert not cache._evicted


def test_the_snapshot_holds_the_budgets_with_their_allowed_disruptions():
    kube = RecordingKube()
    cache = cache_for(kube, [], [])
    cache.informers["poddisruptionbudgets"]._replace([_budget(2), {"metadata": {"name": "none", "namespace": "ns"},
                                                                   "spec": {}}], "1")
    (budget,) = cache.snapshot(now=1000.0).snapshot.budgets
    assert (budget.key, budget.allowed) == ("ns/serve-pdb", 2)
    assert budget.covers(kt.task("p", labels={"app": "serve"}, namespace="ns"))


def test_a_budget_whose_spec_the_disruption_controller_has_not_observed_allows_nothing():
    raw = _budget(2)
    raw["metadata"]["generation"], raw["status"]["observedGeneration"] = 2, 1
    assert disruption_budget_view(raw).allowed == 0


def test_a_pod_created_again_under_the_same_name_is_explained_again():
    """KAI's specs delete their pods and make new ones of the same names: the new pod and its new PodGroup get
    their condition and events although the old ones got the same message."""
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g", gpus=9)], [podgroup("g")])
    committer, _ = commit_once(kube, cache)
    wait(committer)
    again = pod("p", "g", gpus=9)
    again["metadata"].update(uid="uid-p-again", resourceVersion="2")
    group = podgroup("g")
    group["metadata"].update(uid="pg-g-again", resourceVersion="2")
    cache.informers["pods"]._replace([again], "2")
    cache.informers["podgroups"]._replace([group], "2")
    commit_once(kube, cache, committer)
    wait(committer)
    assert len(kube.of("PATCH", "/pods/p/status")) == 2
    assert len(kube.of("PATCH", "/podgroups/g/status")) == 2
    assert sorted(e["involvedObject"]["uid"] for e in kube.of("POST", "/events") if e["reason"] == "Unschedulable") == [
        "pg-g", "pg-g-again", "uid-p", "uid-p-again"]


JAN1 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def commit_reservation(reservation: Reservation) -> tuple[RecordingKube, list[dict]]:
    """A cycle whose session gives PodGroup ``g`` ``reservation``, committed: the kube and the annotation patches."""
    kube = RecordingKube()
    cache = cache_for(kube, [pod("p", "g")], [podgroup("g")])
    committer = Committer(kube, cache, workers=2)
    c = cache.snapshot(now=JAN1)
    session = kt.run(c.snapshot)
    session.jobs["ns/g"].reservation = reservation
    committer.commit(session, c)
    wait(committer)
    return kube, [b["metadata"]["annotations"] for b in kube.of("PATCH", "/podgroups/g") if "metadata" in b]


def test_committer_writes_the_reservation_with_an_event_and_releases_it():
    kube, patches = commit_reservation(Reservation(("n1",), JAN1, JAN1 + 3600, JAN1 + 60))
    written = [a["kai.scheduler/reservation"] for a in patches if "kai.scheduler/reservation" in a]
    assert parse_reservation(written[0]) == Reservation(("n1",), JAN1, JAN1 + 3600, JAN1 + 60)
    (event,) = [e for e in kube.of("POST", "/events") if e["reason"] == "NodesReserved"]
    assert event["message"] == "Reserved nodes n1 until 2026-01-01T01:00:00Z"


def test_a_reservation_that_holds_no_node_is_written_without_a_nodes_reserved_event():
    kube, patches = commit_reservation(Reservation((), JAN1, JAN1 + 3600, None))
    assert any("kai.scheduler/reservation" in a for a in patches)
    assert not [e for e in kube.of("POST", "/events") if e["reason"] == "NodesReserved"]


def test_committer_reports_a_runtime_limit_with_an_event_and_a_condition():
    kube = RecordingKube()
    running = pod("p", "g")
    running["spec"]["nodeName"] = "n1"
    running["status"]["phase"] = "Running"
    pg = podgroup("g")
    pg["metadata"]["annotations"] = {"kai.scheduler/max-runtime": "1h",
                                     "kai.scheduler/last-start-timestamp": "2026-01-01T00:00:00Z"}
    cache = cache_for(kube, [running], [pg])
    committer = Committer(kube, cache, workers=2)
    c = cache.snapshot(now=JAN1 + 3601)
    session = kt.run(c.snapshot, actions=("runtimelimit",))
    committer.commit(session, c)
    wait(committer)
    assert kube.of("POST", "/pods/p/eviction")
    (event,) = [e for e in kube.of("POST", "/events") if e["reason"] == "RuntimeLimitExceeded"]
    assert event["type"] == "Warning" and "maximum runtime (1h0m0s)" in event["message"]
    (status,) = kube.of("PATCH", "/podgroups/g/status")
    assert status["status"]["schedulingConditions"][-1]["type"] == "RuntimeLimitExceeded"
