"""The node scale adjuster end to end: a pending half-GPU pod gets its scaling pod, which goes once the pod is placed.

The adjuster runs as ``kai-scheduler run --components node-scale-adjuster`` under the chart's ServiceAccount
(so its generated RBAC is what it gets), the scheduler and binder as one ``--fake-gpu-nodes`` process, and the
mutating webhook in this process as in test_gpu_sharing.py. The scaling pods' namespace and ServiceAccount
are the chart's. The control plane runs no kube-scheduler, so the scaling pod stays pending: the node a
cluster autoscaler would add is added by the test.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kai.binder.reservation import NAMESPACE as RESERVATION_NAMESPACE
from kai.controllers import nodescaleadjuster as nsa
from kai.kube.client import ApiError, Kube
from support import manifests as m
from support.chart import render_chart
from support.waiting import wait_until
from support.webhooks import mutating_webhook

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SCALING_PODS = f"/api/v1/namespaces/{nsa.NAMESPACE}/pods"


@pytest.fixture(scope="module")
def namespace(kube: Kube, kai_chart, chart_object_path):
    name = f"scale-{uuid.uuid4().hex[:6]}"
    docs = render_chart(DEPLOY / "chart" / "kai-scheduler", values={"nodeScaleAdjuster": {"enabled": True}})
    chart = [d for d in docs if d["kind"] in ("Namespace", "ServiceAccount")
             and nsa.NAMESPACE in (d["metadata"]["name"], d["metadata"].get("namespace"))]
    assert {d["kind"] for d in chart} == {"Namespace", "ServiceAccount"}
    for doc in chart:
        try:
            kube.post(chart_object_path(doc), doc)
        except ApiError as exc:
            if exc.status != 409:
                raise
    for ns in (m.namespace(name), m.namespace(RESERVATION_NAMESPACE)):
        m.apply(kube, ns)
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"kai-scale-test={name}"})


@pytest.fixture(scope="module")
def webhook(kube: Kube, namespace: str, tmp_path_factory):
    with mutating_webhook(kube, namespace, tmp_path_factory.mktemp("certs")) as server:
        yield server


@pytest.fixture(scope="module")
def processes(control_plane, component_kubeconfig, namespace, webhook, kai_run, tmp_path_factory):
    config = tmp_path_factory.mktemp("scale") / "config.yaml"
    config.write_text("actions: allocate\n")
    running = [
        kai_run(["--config", str(config), "--components", "scheduler,binder", "--fake-gpu-nodes"],
                control_plane.kubeconfig, name="scheduler"),
        kai_run(["--components", "node-scale-adjuster", "--scaling-pod-service-account", "kai-scale-adjust"],
                component_kubeconfig("node-scale-adjuster"), name="node-scale-adjuster"),
    ]
    yield running
    for process in running:
        assert process.proc.poll() is None, process.log()[-3000:]
        assert process.terminate() == 0, process.log()[-3000:]


def _logs(processes) -> str:
    return "\n".join(p.log()[-2000:] for p in processes)


def _condition(pod: dict) -> dict:
    return next((c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] == "PodScheduled"), {})


def _get(kube: Kube, path: str) -> dict | None:
    try:
        return kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def test_a_pending_half_gpu_pod_gets_a_scaling_pod_which_goes_once_the_pod_is_placed(kube, namespace, processes):
    node = f"{namespace}-gpu"  # not there yet: the half fits nowhere
    m.apply(kube, m.podgroup(namespace, "half", priority_class="train"))
    pod = m.pod(namespace, "half", "half", annotations={"gpu-fraction": "0.5"},
                node_selector={"kubernetes.io/hostname": node})
    kube.post(f"/api/v1/namespaces/{namespace}/pods", pod)
    pod_path = f"/api/v1/namespaces/{namespace}/pods/half"
    wait_until(lambda: _condition(kube.get(pod_path)).get("reason") == "Unschedulable", 30,
               "the scheduler marking the half unschedulable", detail=lambda: _logs(processes))

    scaling_path = f"{SCALING_PODS}/{namespace}-half"
    scaling = wait_until(lambda: _get(kube, scaling_path), 30, "the scaling pod", detail=lambda: _logs(processes))
    assert scaling["metadata"]["labels"] == {"app": "scaling-pod", "shared-gpu-pod-name": "half",
                                             "shared-gpu-pod-namespace": namespace}
    spec = scaling["spec"]
    assert spec["schedulerName"] == "default-scheduler" and "nodeName" not in spec
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": node}
    assert spec["serviceAccountName"] == "kai-scale-adjust"
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["image"] == nsa.IMAGE and container["command"] == ["kai-scaling-pod"]
    wait_until(lambda: _condition(kube.get(scaling_path)).get("reason") == "Unschedulable", 10,
               "the scaling pod marked unschedulable for the autoscaler")

    # the autoscaler's node: the half is placed and its scaling pod goes
    m.apply(kube, m.gpu_node(node, gpus=1, labels={"kai-scale-test": namespace}))
    wait_until(lambda: kube.get(pod_path)["spec"].get("nodeName") == node, 30, "the half placed on the new node",
               detail=lambda: _logs(processes))
    wait_until(lambda: _get(kube, scaling_path) is None, 30, "the scaling pod deleted", detail=lambda: _logs(processes))
    assert _condition(kube.get(pod_path)).get("status") == "True"
    assert not kube.get(SCALING_PODS, {"labelSelector": f"shared-gpu-pod-namespace={namespace}"})["items"]
