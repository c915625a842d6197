"""Shared GPUs end to end: admission prepares the pods, ``kai-scheduler run`` places and binds them on a kwok node.

The mutating webhook is deploy/admission-mutating-webhook.yaml with a url clientConfig pointing at the
admission component in this process, limited to the test's namespace. The scheduler and binder run
as one ``kai-scheduler run --fake-gpu-nodes`` process: kwok runs the reservation pods but nothing on
a kwok node reports a GPU, so the binder picks each reservation pod's device itself.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from kai.binder.gpusharing import configmap_names
from kai.binder.reservation import DEVICE_ANNOTATION, NAMESPACE, reservation_pod, reservation_pod_name
from kai.kube.client import ApiError, Kube
from support import manifests as m
from support.waiting import wait_until
from support.webhooks import mutating_webhook

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def pods(kube: Kube, namespace: str, query: dict | None = None) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{namespace}/pods", query)["items"]}


@pytest.fixture(scope="module")
def namespace(kube: Kube):
    name = f"gpushare-{uuid.uuid4().hex[:6]}"
    m.install(kube, DEPLOY)
    for ns in (m.namespace(name), m.namespace(NAMESPACE)):
        ns["metadata"]["labels"] = {"kai-gpu-sharing-test": name}
        m.apply(kube, ns)
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"kai-gpu-sharing-test={name}"})


@pytest.fixture(scope="module")
def webhook(kube: Kube, namespace: str, tmp_path_factory):
    with mutating_webhook(kube, namespace, tmp_path_factory.mktemp("certs")) as server:
        yield server


class Restartable:
    """The module's ``kai-scheduler run`` process, which a test may restart."""

    def __init__(self, start) -> None:
        self.start = start
        self.current = start()

    def log(self) -> str:
        return self.current.log()

    def restart(self) -> None:
        assert self.current.terminate() == 0, self.log()[-3000:]
        self.current = self.start()


#: What the chart gives the reservation pods by default, so that restricted Pod Security admits them.
POD_CONTEXT = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
RESOURCES = {"requests": {"cpu": "1m", "memory": "10Mi"}, "limits": {"memory": "100Mi"}}
RESTRICTED = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def scheduler(kube, control_plane, namespace, webhook, kai_run, tmp_path_factory):
    config = tmp_path_factory.mktemp("gpushare") / "config.yaml"
    config.write_text("actions: allocate\n")
    # the reservation pods' namespace enforces restricted Pod Security while this module runs
    kube.patch(f"/api/v1/namespaces/{NAMESPACE}", {"metadata": {"labels": {RESTRICTED: "restricted"}}})
    running = Restartable(lambda: kai_run(
        ["--config", str(config), "--components", "scheduler,binder", "--fake-gpu-nodes",
         f"--resource-reservation-pod-security-context={json.dumps(POD_CONTEXT)}",
         f"--resource-reservation-container-security-context={json.dumps(CONTAINER_CONTEXT)}",
         f"--resource-reservation-pod-resources={json.dumps(RESOURCES)}"],
        control_plane.kubeconfig, name="gpu-sharing"))
    yield running
    kube.patch(f"/api/v1/namespaces/{NAMESPACE}", {"metadata": {"labels": {RESTRICTED: None}}})
    assert running.current.proc.poll() is None, running.log()[-3000:]
    assert running.current.terminate() == 0, running.log()[-3000:]


def shared(kube: Kube, namespace: str, name: str, fraction: str, node: str, tolerations: list | None = None) -> None:
    m.apply(kube, m.podgroup(namespace, name, priority_class="train"))
    pod = m.pod(namespace, name, name, annotations={"gpu-fraction": fraction},
                node_selector={"kubernetes.io/hostname": node})
    if tolerations:
        pod["spec"]["tolerations"] = tolerations
    kube.post(f"/api/v1/namespaces/{namespace}/pods", pod)


def running(kube: Kube, namespace: str, names: list[str]) -> bool:
    current = pods(kube, namespace)
    return all(current.get(n, {}).get("status", {}).get("phase") == "Running" for n in names)


def test_two_halves_share_one_gpu_and_a_larger_share_opens_another(kube, namespace, scheduler):
    node = f"{namespace}-n0"
    m.apply(kube, m.gpu_node(node, gpus=2, labels={"kubernetes.io/hostname": node, "kai-gpu-sharing-test": namespace}))
    started = time.monotonic()
    shared(kube, namespace, "half-a", "0.5", node)
    shared(kube, namespace, "half-b", "0.5", node)
    wait_until(lambda: running(kube, namespace, ["half-a", "half-b"]), 30, "both halves Running")
    shared(kube, namespace, "bigger", "0.6", node)
    wait_until(lambda: running(kube, namespace, ["bigger"]), 30, "the 0.6 pod Running")
    elapsed = time.monotonic() - started

    holders = pods(kube, NAMESPACE, {"fieldSelector": f"spec.nodeName={node}"})
    assert len(holders) == 2, scheduler.log()[-3000:]
    device_of = {h["metadata"]["labels"]["runai-gpu-group"]: h["metadata"]["annotations"][DEVICE_ANNOTATION]
                 for h in holders.values()}
    assert sorted(device_of.values()) == ["0", "1"]
    assert all(h["status"]["phase"] == "Running" for h in holders.values())
    for holder in holders.values():  # admitted under restricted Pod Security, with the resources given
        container = holder["spec"]["containers"][0]
        assert holder["spec"]["securityContext"] == POD_CONTEXT
        assert container["securityContext"] == CONTAINER_CONTEXT
        assert container["resources"] == {"requests": {"cpu": "1m", "memory": "10Mi", "nvidia.com/gpu": "1"},
                                          "limits": {"memory": "100Mi", "nvidia.com/gpu": "1"}}
    with pytest.raises(ApiError) as refused:  # without the contexts, restricted Pod Security refuses the pod
        kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", reservation_pod(node, "no-contexts"))
    assert refused.value.status == 403 and "restricted" in str(refused.value)

    current = pods(kube, namespace)
    group = {n: current[n]["metadata"]["labels"]["runai-gpu-group"] for n in ("half-a", "half-b", "bigger")}
    assert group["half-a"] == group["half-b"] != group["bigger"]
    for name, portion in (("half-a", "0.50"), ("half-b", "0.50"), ("bigger", "0.60")):
        pod = current[name]
        assert pod["spec"]["nodeName"] == node
        capabilities, evar = configmap_names(pod)
        data = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{capabilities}")["data"]
        assert data == {"NVIDIA_VISIBLE_DEVICES": device_of[group[name]], "GPU_PORTION": portion,
                        "RUNAI_NUM_OF_GPUS": portion}
        env = {e["name"]: e["valueFrom"]["configMapKeyRef"]["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert env == dict.fromkeys(("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"), capabilities)
        assert kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{evar}").get("data") in (None, {})
    binds = {b["metadata"]["name"]: b for b in
             kube.get(f"/apis/scheduling.run.ai/v1alpha2/namespaces/{namespace}/bindrequests")["items"]}
    assert {n: binds[n]["spec"]["selectedGPUGroups"] for n in group} == {n: [g] for n, g in group.items()}
    assert all(b["status"]["phase"] == "Succeeded" for b in binds.values())
    assert elapsed < 30, elapsed

    # the last pod of a group gone: its reservation pod goes too
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/bigger", {"gracePeriodSeconds": 0})
    wait_until(lambda: len(pods(kube, NAMESPACE, {"fieldSelector": f"spec.nodeName={node}"})) == 1, 20,
               "the 0.6 pod's reservation pod deleted")
    left = next(iter(pods(kube, NAMESPACE, {"fieldSelector": f"spec.nodeName={node}"}).values()))
    assert left["metadata"]["labels"]["runai-gpu-group"] == group["half-a"]


def test_a_fraction_on_a_tainted_node_gets_kais_reservation_pod_which_a_restarted_binder_reuses(
        kube, namespace, scheduler):
    node = f"{namespace}-tainted"
    body = m.gpu_node(node, gpus=1, labels={"kubernetes.io/hostname": node, "kai-gpu-sharing-test": namespace})
    # NoExecute: kube-controller-manager evicts at once every pod on the node that does not tolerate it
    body["spec"] = {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}
    m.apply(kube, body)
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    shared(kube, namespace, "tolerant-a", "0.5", node, tolerations=[toleration])
    wait_until(lambda: running(kube, namespace, ["tolerant-a"]), 30, "the tolerating pod Running")
    group = pods(kube, namespace)["tolerant-a"]["metadata"]["labels"]["runai-gpu-group"]
    (name, holder), = pods(kube, NAMESPACE, {"fieldSelector": f"spec.nodeName={node}"}).items()
    assert name == reservation_pod_name(node, group)
    assert toleration in holder["spec"]["tolerations"]
    assert holder["metadata"]["labels"]["runai-gpu-group"] == group

    scheduler.restart()
    shared(kube, namespace, "tolerant-b", "0.5", node, tolerations=[toleration])
    wait_until(lambda: running(kube, namespace, ["tolerant-b"]), 30, "the second half Running after the restart")
    assert pods(kube, namespace)["tolerant-b"]["metadata"]["labels"]["runai-gpu-group"] == group
    (again, kept), = pods(kube, NAMESPACE, {"fieldSelector": f"spec.nodeName={node}"}).items()
    assert (again, kept["metadata"]["uid"]) == (name, holder["metadata"]["uid"])  # found, not made again
    assert kept["status"]["phase"] == "Running" and not kept["metadata"].get("deletionTimestamp")
