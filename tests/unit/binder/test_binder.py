"""Binder decisions against an in-memory API: success, retries with backoff, stale requests, 409s.

The real Binding API is exercised by tests/e2e/test_binder.py; here the replies are scripted to
reach failure paths (lost replies, races, plugin failures) deterministically.
"""

from __future__ import annotations

import copy
import json
import threading

import pytest

from kai.binder.binder import Binder, backoff_delay
from kai.binder.plugins import BindError, BindRequest
from kai.binder.settings import BinderPlugins
from kai.kube.client import ApiError
from kai.kube.kaiconfig import KaiObjects
from kai.metrics import BinderMetrics, Registry
from support.kube import FakeApi

BR_PATH = "/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests/"


class FakeKube(FakeApi):
    """The in-memory API with the Binding subresource scripted: failures, lost replies and races."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_binding: list[ApiError] = []  # raised by the next POST .../binding calls
        self.bind_anyway_on_failure = False  # the bind happens but its reply is lost
        self.race_bind_to = ""  # another binder binds the pod to this node just before our POST
        self.bound: list[tuple[str, str]] = []  # (pod, node) of every Binding the fake API carried out

    def add_pod(self, name: str, uid: str = "uid-1", node: str = "") -> dict:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": uid},
               "spec": {"nodeName": node} if node else {}, "status": {}}
        return self.add(f"/api/v1/namespaces/ns/pods/{name}", pod)

    def add_node(self, name: str) -> None:
        self.add(f"/api/v1/nodes/{name}", {"metadata": {"name": name}})

    def add_request(self, name: str, pod: str, node: str, backoff_limit=None, owner_uid="uid-1", **status) -> dict:
        obj = {"metadata": {"name": name, "namespace": "ns",
                            "ownerReferences": [{"kind": "Pod", "name": pod, "uid": owner_uid}]},
               "spec": {"podName": pod, "selectedNode": node, "receivedResourceType": "Regular"},
               "status": status}
        if backoff_limit is not None:
            obj["spec"]["backoffLimit"] = backoff_limit
        return self.add(BR_PATH + name, obj)

    def pod(self, name: str) -> dict:
        return self.objects[f"/api/v1/namespaces/ns/pods/{name}"]

    def serve(self, method, path, query, body, content_type):
        if not (method == "POST" and path.endswith("/binding")):
            return super().serve(method, path, query, body, content_type)
        pod = self.objects.get(path.rsplit("/", 1)[0])
        if pod is not None and self.race_bind_to:
            pod["spec"]["nodeName"] = self.race_bind_to
        if pod is not None and self.fail_binding:
            if self.bind_anyway_on_failure:
                pod["spec"]["nodeName"] = body["target"]["name"]
                self.bound.append((pod["metadata"]["name"], body["target"]["name"]))
            raise self.fail_binding.pop(0)
        reply = super().serve(method, path, query, body, content_type)
        self.bound.append((pod["metadata"]["name"], body["target"]["name"]))
        return reply


class Store(dict):
    """BindRequests by key, read from the fake API (what the informer would hold)."""

    def __init__(self, kube: FakeKube) -> None:
        super().__init__()
        self.kube = kube

    def get(self, key, default=None):
        obj = self.kube.objects.get(BR_PATH + key.split("/", 1)[1])
        return copy.deepcopy(obj) if obj is not None else default

    def list(self):
        return [copy.deepcopy(o) for p, o in self.kube.objects.items() if p.startswith(BR_PATH)]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kube():
    kube = FakeKube()
    kube.add_node("n1")
    return kube


def stored(binder: Binder, kube) -> Binder:
    """``binder`` reading BindRequests from the fake API, as its informer would."""
    binder.stores = {"bindrequests": Store(kube), "nodes": {}}
    return binder


def make_binder(kube, **kw):
    registry = Registry()
    binder = stored(Binder(kube, metrics=BinderMetrics(registry), **kw), kube)
    return binder, registry


def status(kube, name="br"):
    return kube.objects[BR_PATH + name].get("status", {})


def failing_binder(kube, backoff_limit: int, failures: int):
    """A binder on a clock of its own, for BindRequest ``br`` of pod ``p`` on ``n1`` whose first ``failures``
    Bindings fail with a server error."""
    clock = Clock()
    kube.add_pod("p")
    kube.add_request("br", "p", "n1", backoff_limit=backoff_limit)
    kube.fail_binding = [ApiError("POST", "x", 500, "Internal Server Error")] * failures
    binder, _ = make_binder(kube, clock=clock)
    return binder, clock


def test_binds_pod_records_success_condition_and_event(kube):
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    binder, registry = make_binder(kube)
    assert binder.handle("ns/br") is None
    pod = kube.pod("p")
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"]["received-resource-type"] == "Regular"
    assert status(kube)["phase"] == "Succeeded"
    assert pod["status"]["conditions"][0] | {"lastTransitionTime": None} == {
        "type": "PodBound", "status": "True", "reason": "Bound",
        "message": "Pod bound successfully to node n1", "lastTransitionTime": None}
    assert [e["reason"] for e in kube.events] == ["Bound"]
    assert registry.value("kai_binder_bind_attempts_total", {"result": "succeeded"}) == 1
    # a succeeded request is never acted on again
    calls = len(kube.calls)
    assert binder.handle("ns/br") is None and len(kube.calls) == calls


def test_a_whole_gpu_bind_reads_nothing_and_writes_binding_status_condition_and_event(kube):
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    binder, _ = make_binder(kube)
    binder.stores["nodes"] = {"n1": kube.get("/api/v1/nodes/n1")}  # what the node informer holds
    kube.calls.clear()
    binder.handle("ns/br")
    assert [(m, p.rsplit("/", 1)[1]) for m, p, _ in kube.calls] == [
        ("POST", "binding"), ("PATCH", "status"), ("PATCH", "status"), ("POST", "events")]
    assert kube.pod("p")["metadata"]["annotations"]["received-resource-type"] == "Regular"


def test_a_request_without_owner_uid_reads_the_pod_for_the_binding_precondition(kube):
    kube.add_pod("p", uid="uid-7")
    kube.add_pod("q", uid="uid-8", node="n1")
    kube.add_request("br", "p", "n1")["metadata"]["ownerReferences"] = []
    kube.add_request("br2", "q", "n1")["metadata"]["ownerReferences"] = []
    binder, registry = make_binder(kube)
    binder.handle("ns/br")
    binder.handle("ns/br2")
    assert kube.bound == [("p", "n1")]
    assert status(kube)["phase"] == status(kube, "br2")["phase"] == "Succeeded"
    assert [e["involvedObject"]["uid"] for e in kube.events] == ["uid-7"]
    assert registry.value("kai_binder_bind_attempts_total", {"result": "already_bound"}) == 1


def test_missing_node_fails_without_retry_and_leaves_pod_pending(kube):
    kube.add_pod("p")
    kube.add_request("br", "p", "ghost")
    binder, registry = make_binder(kube)
    assert binder.handle("ns/br") is None
    assert status(kube) == {"phase": "Failed", "reason": "node ghost not found"}
    assert "nodeName" not in kube.pod("p")["spec"]
    condition = kube.pod("p")["status"]["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "BindingError")
    assert "node ghost not found" in condition["message"]
    assert [e["type"] for e in kube.events] == ["Warning"]
    assert registry.value("kai_binder_bind_attempts_total", {"result": "failed"}) == 1
    # out of attempts (no backoffLimit): the binder leaves it to the scheduler to delete
    assert BindRequest.from_object(kube.objects[BR_PATH + "br"]).out_of_attempts
    assert binder.handle("ns/br") is None and "nodeName" not in kube.pod("p")["spec"]


def test_retries_with_exponential_backoff_up_to_backoff_limit(kube):
    binder, clock = failing_binder(kube, backoff_limit=3, failures=3)
    assert binder.handle("ns/br") == 1.0
    assert status(kube)["failedAttempts"] == 1 and status(kube)["phase"] == "Failed"
    assert binder.handle("ns/br") == 1.0  # woken early (its own status event): waits, no attempt
    assert len(kube.fail_binding) == 2
    clock.now += 1.0
    assert binder.handle("ns/br") == 2.0
    assert status(kube)["failedAttempts"] == 2
    clock.now += 2.0
    assert binder.handle("ns/br") is None  # third failure: backoffLimit 3 reached
    assert status(kube)["failedAttempts"] == 3 and "500" in status(kube)["reason"]
    assert BindRequest.from_object(kube.objects[BR_PATH + "br"]).out_of_attempts  # the scheduler's rule
    clock.now += 100
    assert binder.handle("ns/br") is None
    assert len(kube.fail_binding) == 0 and "nodeName" not in kube.pod("p")["spec"]


def test_a_failure_whose_status_cannot_be_written_is_attempted_again(kube):
    binder, clock = failing_binder(kube, backoff_limit=None, failures=1)  # no limit: a failure is final
    kube.fail(0, "connection refused", "PATCH", "/bindrequests/br/status", times=1)  # the API server away
    assert binder.handle("ns/br") == 1.0
    assert status(kube) == {}  # nobody learnt of the failure
    clock.now += 1.0
    assert binder.handle("ns/br") is None
    assert status(kube)["phase"] == "Succeeded" and kube.bound == [("p", "n1")]


def test_a_retry_that_succeeds_marks_succeeded(kube):
    clock = Clock()
    kube.add_pod("p")
    kube.add_request("br", "p", "n1", backoff_limit=3)
    kube.fail_binding = [ApiError("POST", "x", 0, "connection reset")]
    binder, _ = make_binder(kube, clock=clock)
    assert binder.handle("ns/br") == 1.0
    clock.now += 1.0
    assert binder.handle("ns/br") is None
    assert status(kube)["phase"] == "Succeeded" and kube.pod("p")["spec"]["nodeName"] == "n1"


def test_lost_reply_then_409_on_the_selected_node_is_success_not_a_second_bind(kube):
    clock = Clock()
    kube.add_pod("p")
    kube.add_request("br", "p", "n1", backoff_limit=2)
    kube.fail_binding = [ApiError("POST", "x", 0, "read timed out")]
    kube.bind_anyway_on_failure = True
    binder, registry = make_binder(kube, clock=clock)
    assert binder.handle("ns/br") == 1.0
    clock.now += 1.0
    assert binder.handle("ns/br") is None
    assert status(kube)["phase"] == "Succeeded"
    assert kube.bound == [("p", "n1")]  # the retry's Binding was refused: bound once
    assert registry.value("kai_binder_bind_attempts_total", {"result": "already_bound"}) == 1


@pytest.mark.parametrize("raced_to", ["n1", "n2"])
def test_409_from_a_concurrent_bind_is_resolved_by_reading_the_pod(kube, raced_to):
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    kube.race_bind_to = raced_to  # someone else binds the pod just before our POST
    binder, registry = make_binder(kube)
    binder.handle("ns/br")
    assert kube.pod("p")["spec"]["nodeName"] == raced_to and kube.bound == []  # never moved by a second bind
    if raced_to == "n1":
        assert status(kube)["phase"] == "Succeeded"
        assert registry.value("kai_binder_bind_attempts_total", {"result": "already_bound"}) == 1
    else:  # it can never be carried out: stale
        assert BR_PATH + "br" not in kube.objects
        assert registry.value("kai_binder_stale_bind_requests_deleted_total") == 1


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (lambda k: None, "pod gone"),
        (lambda k: k.add_pod("p", uid="uid-2"), "pod replaced"),
        (lambda k: k.add_pod("p", node="n2"), "bound elsewhere"),
    ],
)
def test_stale_requests_are_deleted(kube, setup, why):
    setup(kube)
    kube.add_request("br", "p", "n1")
    binder, registry = make_binder(kube)
    assert binder.handle("ns/br") is None
    assert BR_PATH + "br" not in kube.objects, why
    assert kube.bound == []
    assert registry.value("kai_binder_stale_bind_requests_deleted_total") == 1


def test_stale_delete_spares_a_new_request_of_the_same_name(kube):
    kube.add_request("br", "gone-pod", "n1", phase="Succeeded")["metadata"]["uid"] = "br-old"
    binder, _ = make_binder(kube)
    old = BindRequest.from_object(copy.deepcopy(kube.objects[BR_PATH + "br"]))
    kube.objects[BR_PATH + "br"]["metadata"]["uid"] = "br-new"  # deleted and made again by the scheduler
    binder.delete_stale(old, "its pod no longer exists")
    assert kube.objects[BR_PATH + "br"]["metadata"]["uid"] == "br-new"


def test_pod_already_on_selected_node_counts_as_success(kube):
    kube.add_pod("p", node="n1")
    kube.add_request("br", "p", "n1")
    binder, _ = make_binder(kube)
    binder.handle("ns/br")
    assert status(kube)["phase"] == "Succeeded"
    assert kube.bound == [] and not kube.events


def test_sweep_deletes_succeeded_requests_of_deleted_pods(kube):
    kube.add_pod("live", node="n1")
    kube.add_request("keep", "live", "n1", phase="Succeeded")
    kube.add_request("gone", "deleted-pod", "n1", phase="Succeeded")
    kube.add_request("moved", "live", "n2", phase="Succeeded")
    binder, _ = make_binder(kube)
    assert binder.sweep() == 2
    assert [p.rsplit("/", 1)[1] for p in kube.objects if p.startswith(BR_PATH)] == ["keep"]


def test_invalid_request_fails_with_a_clear_reason(kube):
    kube.add_pod("p")
    obj = kube.add_request("br", "p", "n1")
    del obj["spec"]["selectedNode"]
    binder, _ = make_binder(kube)
    binder.handle("ns/br")
    assert status(kube) == {"phase": "Failed", "reason": "spec.podName and spec.selectedNode are required"}


class RecordingPlugin:
    def __init__(self, name, log, fail_pre=False):
        self.name, self.log, self.fail_pre = name, log, fail_pre

    def pre_bind(self, ctx):
        self.log.append(("pre", self.name))
        ctx.state[self.name] = "reserved"
        if self.fail_pre:
            raise BindError(f"{self.name}: no GPU to reserve")

    def post_bind(self, ctx):
        self.log.append(("post", self.name, ctx.state[self.name]))

    def rollback(self, ctx):
        self.log.append(("rollback", self.name))


def test_plugins_wrap_the_bind_and_roll_back_in_reverse(kube):
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    calls = []
    binder, _ = make_binder(kube, plugins=[RecordingPlugin("a", calls), RecordingPlugin("b", calls)])
    binder.handle("ns/br")
    assert calls == [("pre", "a"), ("pre", "b"), ("post", "a", "reserved"), ("post", "b", "reserved")]

    kube.add_pod("q")
    kube.add_request("br2", "q", "n1")
    calls.clear()
    binder.plugins = [RecordingPlugin("a", calls), RecordingPlugin("b", calls, fail_pre=True),
                      RecordingPlugin("c", calls)]
    binder.handle("ns/br2")
    assert calls == [("pre", "a"), ("pre", "b"), ("rollback", "a")]
    assert status(kube, "br2")["reason"] == "b: no GPU to reserve"
    assert "nodeName" not in kube.pod("q")["spec"]


def test_backoff_delay_doubles_and_caps():
    assert [backoff_delay(n, 1.0, 60.0) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_workers_must_be_positive(kube):
    with pytest.raises(ValueError, match="at least 1"):
        Binder(kube, workers=0)


def test_pod_deleted_during_the_bind_rolls_back_and_records_nothing(kube):
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    calls = []
    binder, _ = make_binder(kube, plugins=[RecordingPlugin("gpu", calls)])
    original = kube.request

    def request(method, path, *a, **k):
        if method == "POST" and path.endswith("/binding"):  # the pod goes away just before the bind
            del kube.objects["/api/v1/namespaces/ns/pods/p"]
            raise ApiError(method, path, 409, "Conflict")
        return original(method, path, *a, **k)

    kube.request = request
    assert binder.handle("ns/br") is None
    assert BR_PATH + "br" not in kube.objects  # stale: deleted, no status written to it
    assert calls == [("pre", "gpu"), ("rollback", "gpu")]
    assert not kube.events


def after_binding(kube, then):
    """Makes ``then()`` happen right after the fake API carries out a Binding."""
    original = kube.request

    def request(method, path, *a, **k):
        out = original(method, path, *a, **k)
        if method == "POST" and path.endswith("/binding"):
            then()
        return out

    kube.request = request
    return original


def test_the_outcome_never_lands_on_a_new_request_of_the_same_name(kube):
    kube.add_node("n2")
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")["metadata"]["uid"] = "br-old"
    binder, _ = make_binder(kube)
    # the scheduler deletes the request (its node seemed gone) and makes a new one for n2 while the bind runs
    original = after_binding(kube, lambda: kube.add_request("br", "p", "n2")["metadata"].update(uid="br-new"))
    binder.handle("ns/br")
    assert kube.pod("p")["spec"]["nodeName"] == "n1"
    assert status(kube) == {}  # not "Succeeded" for n2, where the pod is not
    assert kube.pod("p")["status"]["conditions"][0]["reason"] == "Bound"  # the pod was bound: that is recorded

    kube.request = original
    binder.handle("ns/br")  # the new request: its pod is bound to another node, so it is stale
    assert BR_PATH + "br" not in kube.objects
    assert kube.bound == [("p", "n1")]


def test_the_pod_condition_never_lands_on_a_new_pod_of_the_same_name(kube):
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    binder, _ = make_binder(kube)
    after_binding(kube, lambda: kube.add_pod("p", uid="uid-2"))  # deleted and made again right after the bind
    binder.handle("ns/br")
    assert status(kube)["phase"] == "Succeeded"
    assert "conditions" not in kube.pod("p")["status"]


def test_the_predicted_numa_placement_is_copied_onto_the_pod(kube):
    kube.add_pod("p")
    zones = [{"zone": "node-1", "amount": {"cpu": "3"}}]
    kube.add_request("br", "p", "n1")["spec"]["predictedNUMAZones"] = zones
    binder, _ = make_binder(kube)
    binder.handle("ns/br")
    annotations = kube.pod("p")["metadata"]["annotations"]
    assert json.loads(annotations["kai.scheduler/numa-placement-predicted"]) == zones
    assert annotations["received-resource-type"] == "Regular"


class Watch:
    """An informer of a plugin: started and stopped."""

    def __init__(self) -> None:
        self.running = False

    def start(self):
        self.running = True
        return self

    def stop(self, timeout=None):
        self.running = False


class WatchingPlugin(RecordingPlugin):
    def __init__(self, name, log):
        super().__init__(name, log)
        self.watch = Watch()

    def informers(self):
        return {f"{self.name}-claims": self.watch}


def test_the_binder_takes_new_plugins_up_at_the_next_bind(kube):
    calls: list = []
    first = WatchingPlugin("a", calls)
    binder, _ = make_binder(kube, plugins=[first])
    binder.stores[first.name + "-claims"] = first.watch.start()
    binder.settings = KaiObjects(None, lambda shard, cfg: cfg, BinderPlugins((), (first,)),  # type: ignore[arg-type]
                                 component="binder", shard=None)
    kube.add_pod("p")
    kube.add_request("br", "p", "n1")
    binder.handle("ns/br")
    assert [c[:2] for c in calls] == [("pre", "a"), ("post", "a")]

    second = WatchingPlugin("b", calls)
    binder.settings.value, binder.settings.version = BinderPlugins((), (second,)), 1
    kube.add_pod("q")
    kube.add_request("br2", "q", "n1")
    calls.clear()
    binder.handle("ns/br2")
    assert [c[:2] for c in calls] == [("pre", "b"), ("post", "b")]
    assert second.watch.running and not first.watch.running
    assert "b-claims" in binder.stores and "a-claims" not in binder.stores


def test_a_running_binder_reports_outcomes_off_the_workers_path_in_order_per_pod(kube):
    binder, clock = failing_binder(kube, backoff_limit=2, failures=1)
    binder.followups.start()
    release = threading.Event()
    original = kube.request

    def request(method, path, *a, **k):
        if path.endswith("/pods/p/status"):
            release.wait(5)  # a slow API server for the reports only
        return original(method, path, *a, **k)

    kube.request = request
    assert binder.handle("ns/br") == 1.0  # failed: the worker is free while the report waits
    clock.now += 1.0
    assert binder.handle("ns/br") is None
    assert status(kube)["phase"] == "Succeeded" and kube.bound == [("p", "n1")]
    assert "conditions" not in kube.pod("p")["status"] and not kube.events
    release.set()
    assert binder.followups.flush(5)
    assert [e["reason"] for e in kube.events] == ["BindingError", "Bound"]
    assert kube.pod("p")["status"]["conditions"][0]["status"] == "True"  # the later outcome is the one kept
    assert binder.followups.close(1)


def test_a_stored_copy_older_than_the_binders_own_status_write_is_not_acted_on(kube):
    """After the last failure the store may still hold the copy the binder wrote over: no further attempt."""
    binder, clock = failing_binder(kube, backoff_limit=2, failures=2)
    assert binder.handle("ns/br") == 1.0
    first = dict(status(kube))
    clock.now += 1.0
    assert binder.handle("ns/br") is None and status(kube)["failedAttempts"] == 2  # out of attempts
    kube.objects[BR_PATH + "br"]["status"] = first  # the watch has not brought the second write yet
    assert binder.handle("ns/br") is None
    assert "nodeName" not in kube.pod("p")["spec"] and len(kube.events) == 2
