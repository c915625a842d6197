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
