"""The dynamicresources binder plugin against an in-memory API: claims allocated and reserved before the
Binding, a shared claim reserved once more, conflicts retried, rollback."""

from __future__ import annotations

import copy

import pytest

from kai.binder.dynamicresources import FINALIZER, build
from kai.binder.plugins import BindContext, BindError, BindRequest, InvalidBindRequest
from kai.kube.client import ApiError
from support.kube import RequestKube

POD = "/api/v1/namespaces/ns/pods/app"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "b", "device": "gpu-0"}]},
              "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                  {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}


class Claims(RequestKube):
    """Pods and claims by path; PUT checks the resourceVersion (409 on a stale one) and bumps it."""

    def __init__(self, objects: dict[str, dict], conflicts: int = 0) -> None:
        super().__init__()
        self.objects = objects
        self.conflicts = conflicts
        self.writes: list[str] = []

    def request(self, method, path, query=None, body=None, **kw):
        if method == "GET":
            if path not in self.objects:
                raise ApiError(method, path, 404, "not found")
            return copy.deepcopy(self.objects[path])
        assert method == "PUT"
        base = path.removesuffix("/status")
        stored = self.objects[base]
        if self.conflicts:
            self.conflicts -= 1
            stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
            raise ApiError(method, path, 409, "conflict")
        if body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            raise ApiError(method, path, 409, "conflict")
        self.writes.append(path)
        updated = copy.deepcopy(stored)
        if path.endswith("/status"):
            updated["status"] = copy.deepcopy(body.get("status") or {})
        else:
            updated["metadata"]["finalizers"] = list(body["metadata"].get("finalizers") or [])
        updated["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
        self.objects[base] = updated
        return copy.deepcopy(updated)


def claim(name, status=None):
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, "spec": {}, "status": status or {}}


def cluster(claim_status=None, conflicts=0, template=False):
    entry = {"name": "gpu", "resourceClaimTemplateName": "t"} if template else {"name": "gpu",
                                                                              "resourceClaimName": "c"}
    pod = {"metadata": {"name": "app", "namespace": "ns", "uid": "pod-1"}, "spec": {"resourceClaims": [entry]},
           "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c"}]} if template else {}}
    return Claims({POD: pod, f"{CLAIMS}/c": claim("c", claim_status)}, conflicts)


def context(kube, allocations=({"name": "gpu", "allocation": ALLOCATION},)):
    request = BindRequest.from_object({"metadata": {"name": "app", "namespace": "ns"},
                                       "spec": {"podName": "app", "selectedNode": "b",
                                                "resourceClaimAllocations": list(allocations)}})
    return BindContext(request, {"metadata": {"name": "b"}}, kube, read_pod=lambda: kube.get(POD))


def plugin(kube):
    p = build({"bindTimeoutSeconds": "30"})
    p.setup(kube)
    return p


ME = {"resource": "pods", "name": "app", "uid": "pod-1"}


@pytest.mark.parametrize("template", [False, True])
def test_a_claim_is_allocated_reserved_and_protected_before_the_binding(template):
    kube = cluster(template=template)
    plugin(kube).pre_bind(context(kube))
    stored = kube.objects[f"{CLAIMS}/c"]
    assert stored["status"] == {"allocation": ALLOCATION, "reservedFor": [ME]}
    assert stored["metadata"]["finalizers"] == [FINALIZER]


def test_a_shared_claim_keeps_its_allocation_and_gets_one_more_consumer_and_a_retry_after_a_conflict():
    other = {"resource": "pods", "name": "other", "uid": "pod-0"}
    theirs = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "a",
                                       "device": "gpu-3"}]}}
    kube = cluster({"allocation": theirs, "reservedFor": [other]}, conflicts=1)
    ctx = context(kube)
    plugin(kube).pre_bind(ctx)
    assert kube.objects[f"{CLAIMS}/c"]["status"] == {"allocation": theirs, "reservedFor": [other, ME]}
    assert kube.writes == [f"{CLAIMS}/c/status"]  # allocated already: no finalizer written
    plugin(kube).rollback(ctx)
    assert kube.objects[f"{CLAIMS}/c"]["status"] == {"allocation": theirs, "reservedFor": [other]}


def test_rollback_takes_back_the_allocation_and_the_finalizer_it_added():
    kube = cluster()
    ctx = context(kube)
    p = plugin(kube)
    p.pre_bind(ctx)
    p.rollback(ctx)
    stored = kube.objects[f"{CLAIMS}/c"]
    assert stored["status"] == {"reservedFor": []}
    assert stored["metadata"]["finalizers"] == []


def test_bad_allocations_and_missing_claims_fail_the_bind_naming_them():
    kube = cluster()
    with pytest.raises(InvalidBindRequest, match="no resource claim entry 'nic'"):
        plugin(kube).pre_bind(context(kube, [{"name": "nic", "allocation": ALLOCATION}]))
    with pytest.raises(InvalidBindRequest, match=r"resourceClaimAllocations\[0\]: the allocation is missing"):
        plugin(kube).pre_bind(context(kube, [{"name": "gpu"}]))
    del kube.objects[f"{CLAIMS}/c"]
    with pytest.raises(BindError, match="resource claim ns/c does not exist"):
        plugin(kube).pre_bind(context(kube))
    with pytest.raises(ValueError, match="bindTimeoutSeconds must be positive"):
        build({"bindTimeoutSeconds": "0"})


class WithCreate(Claims):
    """Claims that can also be listed, created (generateName), deleted, and a pod status patched."""

    def request(self, method, path, query=None, body=None, **kw):
        if method == "GET" and path == CLAIMS:
            return {"items": [copy.deepcopy(o) for p, o in self.objects.items() if p.startswith(CLAIMS + "/")]}
        if method == "POST":
            name = body["metadata"]["generateName"] + "x1"
            self.objects[f"{path}/{name}"] = {**copy.deepcopy(body), "metadata": {
                **body["metadata"], "name": name, "namespace": "ns", "resourceVersion": "1"}, "status": {}}
            return copy.deepcopy(self.objects[f"{path}/{name}"])
        if method == "DELETE":
            self.writes.append(f"DELETE {path}")
            del self.objects[path]
            return {}
        if method == "PATCH":
            self.writes.append(f"PATCH {path}")
            self.objects[POD]["status"] = {**self.objects[POD].get("status", {}), **body["status"]}
            return copy.deepcopy(self.objects[POD])
        return super().request(method, path, query, body, **kw)


EXTENDED = {"allocation": ALLOCATION,
            "deviceRequests": [{"name": "container-0-request-0",
                                "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}],
            "containerMappings": [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                   "requestName": "container-0-request-0"}]}


def extended_context(kube):
    request = BindRequest.from_object({"metadata": {"name": "app", "namespace": "ns"},
                                       "spec": {"podName": "app", "selectedNode": "b",
                                                "extendedResourceClaimAllocation": EXTENDED}})
    return BindContext(request, {"metadata": {"name": "b"}}, kube, read_pod=lambda: kube.get(POD))


def test_an_implicit_claim_is_created_allocated_reserved_and_named_in_the_pod_status_and_rolled_back():
    kube = WithCreate({POD: {"metadata": {"name": "app", "namespace": "ns", "uid": "pod-1"}, "spec": {},
                             "status": {}}})
    ctx = extended_context(kube)
    p = plugin(kube)
    p.pre_bind(ctx)
    name = "app-extended-resources-x1"
    stored = kube.objects[f"{CLAIMS}/{name}"]
    assert stored["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert stored["metadata"]["ownerReferences"][0]["uid"] == "pod-1"
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    assert stored["spec"]["devices"]["requests"] == [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": "gpu.example.com", "count": 1, "allocationMode": "ExactCount"}}]
    assert stored["status"] == {"allocation": ALLOCATION, "reservedFor": [ME]}
    assert kube.objects[POD]["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": name, "requestMappings": EXTENDED["containerMappings"]}
    # a second attempt finds the claim it made and does not create another
    again = extended_context(kube)
    p.pre_bind(again)
    assert [k for k in kube.objects if k.startswith(CLAIMS)] == [f"{CLAIMS}/{name}"]
    p.rollback(ctx)
    assert f"{CLAIMS}/{name}" not in kube.objects
    assert kube.objects[POD]["status"]["extendedResourceClaimStatus"] is None


def test_a_pre_bind_failing_half_way_takes_back_what_it_wrote():
    kube = cluster()
    kube.objects[POD]["spec"]["resourceClaims"].append({"name": "nic", "resourceClaimName": "gone"})
    with pytest.raises(BindError, match="resource claim ns/gone does not exist"):
        plugin(kube).pre_bind(context(kube, [{"name": "gpu", "allocation": ALLOCATION},
                                             {"name": "nic", "allocation": ALLOCATION}]))
    stored = kube.objects[f"{CLAIMS}/c"]
    assert stored["status"] == {"reservedFor": []} and stored["metadata"]["finalizers"] == []


def test_an_implicit_claim_whose_pod_status_cannot_be_written_is_deleted():
    class NoPodStatus(WithCreate):
        def request(self, method, path, query=None, body=None, **kw):
            if method == "PATCH" and body["status"].get("extendedResourceClaimStatus"):
                raise ApiError(method, path, 500, "boom")
            return super().request(method, path, query, body, **kw)

    kube = NoPodStatus({POD: {"metadata": {"name": "app", "namespace": "ns", "uid": "pod-1"}, "spec": {},
                              "status": {}}})
    with pytest.raises(BindError, match="cannot record claim ns/app-extended-resources-x1"):
        plugin(kube).pre_bind(extended_context(kube))
    assert not [k for k in kube.objects if k.startswith(CLAIMS)]
