"""The dynamicresources binder plugin against an in-memory API: claims allocated and reserved before the
Binding, a shared claim reserved once more, conflicts retried, rollback."""

from __future__ import annotations

import pytest

from kai.binder.dynamicresources import FINALIZER, build
from kai.binder.plugins import BindContext, BindError, BindRequest, InvalidBindRequest
from support.kube import FakeApi

POD = "/api/v1/namespaces/ns/pods/app"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "b", "device": "gpu-0"}]},
              "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                  {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}


class Claims(FakeApi):
    """The in-memory API with ``objects``, where someone else writes the object of each of the first ``conflicts``
    PUTs just before it (409: the resourceVersion moved on)."""

    def __init__(self, objects: dict[str, dict], conflicts: int = 0) -> None:
        super().__init__()
        for path, obj in objects.items():
            self.add(path, obj)
        self.conflicts = conflicts

    def serve(self, method, path, query, body, content_type):
        if method == "PUT" and self.conflicts:
            self.conflicts -= 1
            target = path.removesuffix("/status")
            self.add(target, self.objects[target])
        return super().serve(method, path, query, body, content_type)


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
    assert {call.method for call in kube.calls} <= {"GET", "PUT"}  # claims are written whole, at their version


def test_a_shared_claim_keeps_its_allocation_and_gets_one_more_consumer_and_a_retry_after_a_conflict():
    other = {"resource": "pods", "name": "other", "uid": "pod-0"}
    theirs = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "a",
                                       "device": "gpu-3"}]}}
    kube = cluster({"allocation": theirs, "reservedFor": [other]}, conflicts=1)
    ctx = context(kube)
    plugin(kube).pre_bind(ctx)
    assert kube.objects[f"{CLAIMS}/c"]["status"] == {"allocation": theirs, "reservedFor": [other, ME]}
    assert kube.paths("PUT") == [f"{CLAIMS}/c/status"] * 2  # the conflict, the retry; no finalizer written
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
    kube = Claims({POD: {"metadata": {"name": "app", "namespace": "ns", "uid": "pod-1"}, "spec": {}, "status": {}}})
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
    assert "extendedResourceClaimStatus" not in kube.objects[POD]["status"]  # the merge patch's null removed it


def test_a_pre_bind_failing_half_way_takes_back_what_it_wrote():
    kube = cluster()
    kube.objects[POD]["spec"]["resourceClaims"].append({"name": "nic", "resourceClaimName": "gone"})
    with pytest.raises(BindError, match="resource claim ns/gone does not exist"):
        plugin(kube).pre_bind(context(kube, [{"name": "gpu", "allocation": ALLOCATION},
                                             {"name": "nic", "allocation": ALLOCATION}]))
    stored = kube.objects[f"{CLAIMS}/c"]
    assert stored["status"] == {"reservedFor": []} and stored["metadata"]["finalizers"] == []


def test_an_implicit_claim_whose_pod_status_cannot_be_written_is_deleted():
    kube = Claims({POD: {"metadata": {"name": "app", "namespace": "ns", "uid": "pod-1"}, "spec": {}, "status": {}}})
    kube.fail(500, "boom", "PATCH", f"{POD}/status")
    with pytest.raises(BindError, match="cannot record claim ns/app-extended-resources-x1"):
        plugin(kube).pre_bind(extended_context(kube))
    assert not [k for k in kube.objects if k.startswith(CLAIMS)]
