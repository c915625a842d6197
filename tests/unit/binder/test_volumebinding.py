"""The volumebinding binder plugin against an in-memory API: static volumes, provisioning, waiting, rollback."""

from __future__ import annotations

import pytest

from kai.binder.plugins import BindContext, BindError, BindRequest
from kai.binder.volumebinding import VolumeBinding, build
from support.kube import FakeApi, merge_patch

PV_PATH = "/api/v1/persistentvolumes"
CLAIM = "/api/v1/namespaces/ns/persistentvolumeclaims/data"


def cluster(provisioner="kubernetes.io/no-provisioner", volume_host="node-b") -> FakeApi:
    kube = FakeApi()
    for path, obj in {
        "/api/v1/namespaces/ns/pods/app": {"metadata": {"name": "app", "namespace": "ns", "uid": "pod-1"},
                                           "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {
                                               "claimName": "data"}}]}},
        CLAIM: {"metadata": {"name": "data", "namespace": "ns", "uid": "c-1"},
                "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}},
        "/apis/storage.k8s.io/v1/storageclasses/local": {"metadata": {"name": "local"}, "provisioner": provisioner,
                                                         "volumeBindingMode": "WaitForFirstConsumer"},
        PV_PATH + "/pv-b": {"metadata": {"name": "pv-b"},
                            "spec": {"storageClassName": "local", "capacity": {"storage": "5Gi"},
                                     "accessModes": ["ReadWriteOnce"], "nodeAffinity": {"required": {
                                         "nodeSelectorTerms": [{"matchExpressions": [{
                                             "key": "kubernetes.io/hostname", "operator": "In",
                                             "values": [volume_host]}]}]}}},
                            "status": {"phase": "Available"}},
    }.items():
        kube.add(path, obj)
    return kube


def context(kube, node="node-b"):
    request = BindRequest.from_object({"metadata": {"name": "app", "namespace": "ns"},
                                       "spec": {"podName": "app", "selectedNode": node}})
    return BindContext(request, {"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}}, kube,
                       read_pod=lambda: kube.get("/api/v1/namespaces/ns/pods/app"))


def plugin(kube, controller=None, timeout=5.0) -> VolumeBinding:
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds
        if controller is not None:
            controller(kube)

    vb = VolumeBinding(timeout, sleep=sleep, clock=lambda: clock[0])
    vb.kube = kube  # no watch of claims: every bind looks at the pod
    return vb


def pv_controller(kube):
    """What kube's PV controller does with a volume pre-bound to a claim: completes the claim's binding."""
    ref = kube.objects[PV_PATH + "/pv-b"]["spec"].get("claimRef")
    if ref:
        merge_patch(kube.objects[CLAIM], {"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                                          "spec": {"volumeName": "pv-b"}})


def test_a_claim_is_bound_to_the_static_volume_of_the_selected_node():
    kube = cluster()
    plugin(kube, pv_controller).pre_bind(context(kube))
    ref = kube.objects[PV_PATH + "/pv-b"]["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"], ref["kind"]) == ("ns", "data", "c-1", "PersistentVolumeClaim")
    assert kube.objects[CLAIM]["spec"]["volumeName"] == "pv-b"
    assert {call.method for call in kube.calls} <= {"GET", "PATCH"}


def test_a_claim_without_a_static_volume_is_annotated_for_its_provisioner():
    kube = cluster(provisioner="csi.example.com", volume_host="node-a")

    def provisioner(kube):
        if kube.objects[CLAIM]["metadata"].get("annotations", {}).get("volume.kubernetes.io/selected-node"):
            merge_patch(kube.objects[CLAIM], {"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                                              "spec": {"volumeName": "pvc-new"}})

    plugin(kube, provisioner).pre_bind(context(kube))
    assert kube.objects[CLAIM]["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "node-b"
    assert "claimRef" not in kube.objects[PV_PATH + "/pv-b"]["spec"]


def test_a_bind_that_times_out_takes_its_claim_ref_back():
    kube = cluster()
    with pytest.raises(BindError, match="timed out waiting 5s for claims ns/data to be bound"):
        plugin(kube).pre_bind(context(kube))
    assert "claimRef" not in kube.objects[PV_PATH + "/pv-b"]["spec"]


def test_no_volume_and_no_provisioner_fails_the_bind_and_a_reset_annotation_too():
    kube = cluster(volume_host="node-a")
    with pytest.raises(BindError, match="storage class local provisions none"):
        plugin(kube).pre_bind(context(kube))
    kube = cluster(provisioner="csi.example.com", volume_host="node-a")

    def gives_up(kube):
        merge_patch(kube.objects[CLAIM], {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": None}}})

    with pytest.raises(BindError, match="selectedNode annotation reset for PVC 'data'"):
        plugin(kube, gives_up).pre_bind(context(kube))


def test_bound_claims_need_nothing_and_the_timeout_argument_is_checked():
    kube = cluster()
    merge_patch(kube.objects[CLAIM], {"spec": {"volumeName": "pv-b"}})
    plugin(kube).pre_bind(context(kube))
    assert kube.paths("PATCH") == []
    assert build({"bindTimeoutSeconds": "30"}).timeout == 30.0
    with pytest.raises(ValueError, match="bindTimeoutSeconds must be a number of seconds"):
        build({"bindTimeoutSeconds": "soon"})
