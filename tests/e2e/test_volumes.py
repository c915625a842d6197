"""PersistentVolumeClaims against the real control plane (kube-controller-manager's PV controller binds claims):
a WaitForFirstConsumer claim brings its pod to the node of its local volume and is bound to that volume; a pod
naming a missing claim stays pending with kube-scheduler's message.
"""

from __future__ import annotations

import uuid

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def scheduler(kai_scheduler):
    return kai_scheduler("allocate")


@pytest.fixture
def ns(kube):
    """A namespace, a WaitForFirstConsumer class without provisioner, two kwok nodes and a 1Gi local volume
    reachable from the second node only; all deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    for node in ("a", "b"):
        host = f"{name}-{node}"
        m.apply(kube, m.gpu_node(host, gpus=0, cpu="4", labels={"e2e": name, "kubernetes.io/hostname": host}))
    kube.post("/apis/storage.k8s.io/v1/storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})
    kube.post("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{name}-pv"},
        "spec": {"storageClassName": name, "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "local": {"path": "/mnt/disk"}, "persistentVolumeReclaimPolicy": "Retain",
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [f"{name}-b"]}]}]}}}})
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    kube.request("DELETE", f"/api/v1/namespaces/{name}")
    kube.request("DELETE", f"/api/v1/persistentvolumes/{name}-pv")
    kube.request("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{name}")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})


def claim(kube, ns, name, cls):
    kube.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"storageClassName": cls, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}})


def pod_with_claim(kube, ns, name, claim_name):
    m.apply(kube, m.podgroup(ns, name))
    body = m.pod(ns, name, name, cpu="100m", node_selector={"e2e": ns})
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    m.apply(kube, body)


def get_pod(kube, ns, name) -> dict:
    return kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def test_a_local_volume_claim_brings_the_pod_to_the_volumes_node_and_is_bound_to_it(kube, scheduler, ns):
    claim(kube, ns, "data", ns)
    pod_with_claim(kube, ns, "app", "data")
    wait_until(lambda: get_pod(kube, ns, "app")["spec"].get("nodeName"), 60, "the pod bound")
    assert get_pod(kube, ns, "app")["spec"]["nodeName"] == f"{ns}-b"
    wait_until(lambda: kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")["status"].get("phase")
               == "Bound", 60, "the claim Bound")
    pvc = kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
    assert pvc["spec"]["volumeName"] == f"{ns}-pv"


def test_a_pod_naming_a_missing_claim_stays_pending_with_the_message(kube, scheduler, ns):
    pod_with_claim(kube, ns, "lost", "nowhere")

    def message():
        conditions = get_pod(kube, ns, "lost")["status"].get("conditions") or []
        return next((c.get("message") or "" for c in conditions
                     if c["type"] == "PodScheduled" and c["status"] == "False"), "")

    wait_until(lambda: 'persistentvolumeclaim "nowhere" not found' in message(), 60, "the pod's message")
    assert "VolumeBinding" in message()
    assert not get_pod(kube, ns, "lost")["spec"].get("nodeName")
