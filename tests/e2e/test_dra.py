"""Dynamic Resource Allocation against the real control plane (Kubernetes 1.34, ``resource.k8s.io/v1``):
ResourceSlices publish GPUs of two kwok nodes, kube-controller-manager turns ResourceClaimTemplates into
claims, the scheduler places pods where their claims can be allocated and the binder writes the claims'
allocation and reservation before the Binding.

Each test has its own namespace, nodes, DeviceClass (a name with ``gpu``: its devices count as GPUs) and
driver, so tests do not see each other's devices.
"""

from __future__ import annotations

import uuid

import pytest

from kai.dev import dradevices
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def scheduler(kai_scheduler):
    return kai_scheduler("allocate, preempt")


class Cluster:
    """One test's namespace: nodes ``<ns>-a`` (two A100) and ``<ns>-b`` (two H100), its DeviceClass and queue."""

    def __init__(self, kube, name: str) -> None:
        self.kube, self.ns = kube, name
        self.driver = f"{name}.gpu.example.com"
        self.device_class = f"{name}-gpu"
        self.queue = f"{name}-q"

    def slice_for(self, node: str, model: str, count: int = 2) -> None:
        self.kube.post(f"{RESOURCE}/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": self.driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": model}}}
                                 for i in range(count)]}})

    def requests(self, model: str | None = None, count: int = 1) -> dict:
        exactly: dict = {"deviceClassName": self.device_class, "count": count}
        if model:
            exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{self.driver}"].model == "{model}"'}}]
        return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}

    def claim(self, name: str, model: str | None = None, count: int = 1) -> None:
        """A claim pods name directly, labelled with their queue (KAI asks it of a shared GPU claim)."""
        self.kube.post(f"{RESOURCE}/namespaces/{self.ns}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": self.queue}},
            "spec": self.requests(model, count)})

    def template(self, name: str, model: str | None = None, count: int = 1) -> None:
        self.kube.post(f"{RESOURCE}/namespaces/{self.ns}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": self.requests(model, count)}})

    def job(self, name: str, pods: int = 1, min_member: int = 1, claim: str | None = None,
            template: str | None = None, priority_class: str = "train") -> list[str]:
        """A PodGroup and its pods, each using ``claim`` (by name) or a claim of ``template``."""
        m.apply(self.kube, m.podgroup(self.ns, name, queue=self.queue, min_member=min_member,
                                      priority_class=priority_class))
        names = [name] if pods == 1 else [f"{name}-{i}" for i in range(pods)]
        for pod_name in names:
            body = m.pod(self.ns, pod_name, name, node_selector={"e2e": self.ns})
            entry = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
            body["spec"]["resourceClaims"] = [{"name": "gpu", **entry}]
            body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
            m.apply(self.kube, body)
        return names

    def pod(self, name: str) -> dict:
        return self.kube.get(f"/api/v1/namespaces/{self.ns}/pods/{name}")

    def claim_of(self, pod: str) -> dict:
        """The claim a pod uses (the one named, or the one generated for it)."""
        body = self.pod(pod)
        entry = body["spec"]["resourceClaims"][0]
        name = entry.get("resourceClaimName") or next(
            s["resourceClaimName"] for s in body["status"]["resourceClaimStatuses"])
        return self.kube.get(f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{name}")

    def devices(self, pod: str) -> set[tuple[str, str]]:
        results = self.claim_of(pod)["status"]["allocation"]["devices"]["results"]
        return {(r["pool"], r["device"]) for r in results}

    def bound(self, names: list[str]) -> dict[str, str]:
        pods = {p["metadata"]["name"]: p for p in self.kube.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]}
        return {n: pods[n]["spec"].get("nodeName", "") for n in names if n in pods}

    def events(self, name: str) -> list[dict]:
        return [e for e in self.kube.get(f"/api/v1/namespaces/{self.ns}/events")["items"]
                if e["involvedObject"]["name"] == name]


@pytest.fixture
def cluster(kube):
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    c = Cluster(kube, name)
    m.apply(kube, m.namespace(name))
    for node, model in (("a", "A100"), ("b", "H100")):
        host = f"{name}-{node}"
        m.apply(kube, m.gpu_node(host, gpus=0, cpu="8", labels={"e2e": name}))
        c.slice_for(host, model)
    kube.post(f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": c.device_class},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{c.driver}"'}}]}})
    queue = m.queue(c.queue, gpu_quota=4)
    queue["metadata"]["labels"] = {"e2e": name}
    m.apply(kube, queue)
    yield c
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    kube.request("DELETE", f"/api/v1/namespaces/{name}")
    for node in ("a", "b"):
        kube.request("DELETE", f"{RESOURCE}/resourceslices/{name}-{node}-gpus")
    kube.request("DELETE", f"{RESOURCE}/deviceclasses/{c.device_class}")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})
    kube.request("DELETE", f"{m.collection('Queue')}/{c.queue}")


def test_a_claim_only_node_b_can_satisfy_lands_there_allocated_and_reserved(cluster, scheduler):
    cluster.claim("h100", model="H100")
    cluster.job("app", claim="h100")
    wait_until(lambda: cluster.bound(["app"]).get("app"), 60, "the pod bound")
    assert cluster.bound(["app"]) == {"app": f"{cluster.ns}-b"}
    claim = cluster.claim_of("app")
    pod = cluster.pod("app")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "app", "uid": pod["metadata"]["uid"]}]
    allocation = claim["status"]["allocation"]
    assert {r["pool"] for r in allocation["devices"]["results"]} == {f"{cluster.ns}-b"}
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [f"{cluster.ns}-b"]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    bind_request = scheduler_bind_request(cluster, "app")
    assert bind_request["spec"]["resourceClaimAllocations"][0]["name"] == "gpu"


def scheduler_bind_request(cluster, pod):
    return cluster.kube.get(f"{m.collection('BindRequest', cluster.ns)}/{pod}")


def test_a_claim_no_slice_can_satisfy_leaves_the_pod_pending_with_an_event_naming_it(cluster, scheduler):
    cluster.claim("b200", model="B200")
    cluster.job("lost", claim="b200")

    def unschedulable() -> str:
        return next((e["message"] for e in cluster.events("lost") if e["reason"] == "Unschedulable"), "")

    message = wait_until(unschedulable, 60, "the pod's Unschedulable event")
    assert f"claim {cluster.ns}/b200 request gpu: no device of class {cluster.device_class}" in message
    assert not cluster.bound(["lost"])["lost"]
    claim = cluster.claim_of("lost")
    assert not claim["status"].get("allocation") and not claim["status"].get("reservedFor")


def test_a_gang_of_dra_pods_binds_all_or_nothing(cluster, scheduler):
    cluster.template("one-gpu")
    too_big = cluster.job("big", pods=5, min_member=5, template="one-gpu")  # 4 devices for 5 pods
    wait_until(lambda: any(e["reason"] == "Unschedulable" for e in cluster.events("big")), 60,
               "the five-pod gang found unschedulable")
    assert not any(cluster.bound(too_big).values())
    for pod in too_big:
        assert not cluster.claim_of(pod)["status"].get("allocation")
    fits = cluster.job("fits", pods=4, min_member=4, template="one-gpu")
    wait_until(lambda: all(cluster.bound(fits).values()), 60, "the four-pod gang bound")
    devices = [cluster.devices(p) for p in fits]
    assert len(set().union(*devices)) == 4  # every device once
    assert not any(cluster.bound(too_big).values())


def test_a_higher_priority_dra_pod_preempts_and_reuses_the_victims_device(cluster, scheduler):
    cluster.template("a100s", model="A100", count=2)
    cluster.template("a100", model="A100")
    cluster.job("train", template="a100s")
    wait_until(lambda: cluster.bound(["train"]).get("train"), 60, "the training pod bound on node a")
    victim_devices = cluster.devices("train")
    cluster.job("serve", template="a100", priority_class="inference")
    wait_until(lambda: "train" not in cluster.bound(["train"]), 90, "the training pod preempted")
    wait_until(lambda: cluster.bound(["serve"]).get("serve"), 90, "the inference pod bound")
    assert cluster.bound(["serve"]) == {"serve": f"{cluster.ns}-a"}
    assert cluster.devices("serve") <= victim_devices
    assert any(e["reason"] == "Evict" for e in cluster.events("train"))


def test_a_gpu_pod_on_a_node_whose_gpus_only_dra_publishes_is_bound_through_an_implicit_claim(cluster, scheduler,
                                                                                               kube):
    """KEP-5004: a DeviceClass with ``extendedResourceName: nvidia.com/gpu`` backs the GPUs of node c, which has
    no nvidia.com/gpu of its own; a pod asking one lands there and gets a claim the binder created."""
    host = f"{cluster.ns}-c"
    m.apply(kube, m.gpu_node(host, gpus=0, cpu="8", labels={"e2e": cluster.ns}))
    cluster.slice_for(host, "L4", count=1)
    backing = f"{cluster.ns}-backing-gpu"
    kube.post(f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": backing},
        "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression": (
            f'device.driver == "{cluster.driver}" && device.attributes["{cluster.driver}"].model == "L4"')}}]}})
    try:
        m.apply(kube, m.podgroup(cluster.ns, "legacy", queue=cluster.queue))
        m.apply(kube, m.pod(cluster.ns, "legacy", "legacy", gpus=1, node_selector={"e2e": cluster.ns}))
        wait_until(lambda: cluster.bound(["legacy"]).get("legacy"), 60, "the nvidia.com/gpu pod bound")
        assert cluster.bound(["legacy"]) == {"legacy": host}
        claims = kube.get(f"{RESOURCE}/namespaces/{cluster.ns}/resourceclaims")["items"]
        (claim,) = [c for c in claims if c["metadata"].get("annotations", {}).get(
            "resource.kubernetes.io/extended-resource-claim") == "true"]
        pod = cluster.pod("legacy")
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == backing
        assert [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]] == [
            (host, "gpu-0")]
        assert claim["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]
        status = pod["status"]["extendedResourceClaimStatus"]
        assert status["resourceClaimName"] == claim["metadata"]["name"]
        assert status["requestMappings"] == [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                              "requestName": "container-0-request-2"}]  # cpu, memory, nvidia.com/gpu
    finally:
        kube.request("DELETE", f"{RESOURCE}/resourceslices/{host}-gpus")
        kube.request("DELETE", f"{RESOURCE}/deviceclasses/{backing}")


def test_a_claim_of_the_fake_gpu_drivers_class_is_bound_on_the_fake_gpu_node_publishing_it(cluster, kube, scheduler):
    """The dev cluster's fake GPU node ``<ns>-c`` publishes two GPUs as KAI's e2e setup does (DeviceClass
    ``gpu.nvidia.com`` selecting them with CEL): a pod whose claim asks one of that class lands there."""
    host = f"{cluster.ns}-c"
    m.apply(kube, m.gpu_node(host, gpus=0, cpu="8", labels={"e2e": cluster.ns}))
    created = m.apply(kube, dradevices.device_class())
    m.apply(kube, dradevices.resource_slice(host, gpus=2))
    try:
        request = {"name": "gpu", "exactly": {"deviceClassName": dradevices.DEVICE_CLASS}}
        kube.post(f"{RESOURCE}/namespaces/{cluster.ns}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "fake-gpu", "labels": {"kai.scheduler/queue": cluster.queue}},
            "spec": {"devices": {"requests": [request]}}})
        cluster.job("fake", claim="fake-gpu")
        wait_until(lambda: cluster.bound(["fake"]).get("fake"), 60, "the pod bound")
        assert cluster.bound(["fake"]) == {"fake": host}
        (result,) = cluster.claim_of("fake")["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) in {
            (dradevices.DRIVER, host, f"gpu-{i}") for i in range(2)}
    finally:
        kube.request("DELETE", f"{RESOURCE}/resourceslices/{dradevices.resource_slice(host, 0)['metadata']['name']}")
        if created:
            kube.request("DELETE", f"{RESOURCE}/deviceclasses/{dradevices.DEVICE_CLASS}")
