"""Kubernetes' filters KAI applies, against the real control plane: native sidecars in a pod's request, host
ports in use, ConfigMaps a pod needs.

Each test works in its own namespace on its own kwok node (pods select it by label) with one
``kai-scheduler run`` process for the module.
"""

from __future__ import annotations

import time
import uuid

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"


def pods(kube, ns) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])}


def running(kube, ns, name) -> bool:
    return pods(kube, ns)[name]["status"].get("phase") == "Running"


def unschedulable(kube, ns, name) -> str:
    """The message of the pod's PodScheduled=False condition, or ''."""
    conditions = pods(kube, ns)[name]["status"].get("conditions") or []
    return next((c.get("message") or "" for c in conditions
                 if c["type"] == "PodScheduled" and c["status"] == "False"), "")


def event_messages(kube, ns, name) -> list[str]:
    return [e["message"] for e in kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
            if e["involvedObject"]["name"] == name and e["reason"] == "Unschedulable"]


@pytest.fixture(scope="module")
def scheduler(kai_scheduler):
    return kai_scheduler(ACTIONS)


@pytest.fixture
def ns(kube):
    """A namespace and the 4-CPU kwok node its pods select (label ``e2e=<ns>``); deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    node(kube, f"{name}-n0", {"e2e": name, "role": "target"}, cpu="4")
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    wait_until(lambda: not pods(kube, name), 30, f"the pods of {name} gone")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})


def node(kube, name, labels, cpu):
    m.apply(kube, m.gpu_node(name, gpus=0, cpu=cpu, labels=labels))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                           kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])),
               what=f"node {name} Ready")


def pod(kube, ns, name, cpu="100m", **spec):
    """A pod of its own PodGroup on the test's node; ``spec`` fields are merged into the pod's spec."""
    m.apply(kube, m.podgroup(ns, name))
    body = m.pod(ns, name, name, cpu=cpu, node_selector={"e2e": ns, "role": "target"})
    body["spec"].update(spec)
    m.apply(kube, body)


def sidecar(cpu: str) -> dict:
    return {"name": "proxy", "image": "busybox", "restartPolicy": "Always",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}


def test_a_pod_whose_sidecar_does_not_fit_beside_it_stays_pending(kube, scheduler, ns):
    node(kube, f"{ns}-large", {"e2e": ns}, cpu="16")  # some node of the pool could hold the pod
    pod(kube, ns, "big", cpu="3", initContainers=[sidecar("2")])
    message = wait_until(lambda: unschedulable(kube, ns, "big"), 30, "the pod's PodScheduled=False condition")
    assert "1 node(s) didn't have enough resources: CPU cores" in message
    assert wait_until(lambda: [t for t in event_messages(kube, ns, "big")
                               if "node(s) didn't have enough resources: CPU cores" in t], 20, "the event")
    pod(kube, ns, "small", cpu="3", initContainers=[sidecar("500m")])
    wait_until(lambda: running(kube, ns, "small"), 30, "the pod whose sidecar fits Running")
    assert not pods(kube, ns)["big"]["spec"].get("nodeName")


def test_a_host_port_in_use_keeps_a_pod_pending_while_one_without_it_binds(kube, scheduler, ns):
    holder = m.pod(ns, "holder", scheduler_name="default-scheduler")
    holder["spec"]["nodeName"] = f"{ns}-n0"
    holder["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    m.apply(kube, holder)
    wait_until(lambda: running(kube, ns, "holder"), 30, "the pod holding the port Running")
    ports = [{"containerPort": 8080, "hostPort": 8080}]
    pod(kube, ns, "clash", containers=[{"name": "main", "image": "busybox", "ports": ports,
                                        "resources": {"requests": {"cpu": "100m"}}}])
    pod(kube, ns, "free")
    wait_until(lambda: running(kube, ns, "free"), 30, "the pod without a host port Running")
    message = wait_until(lambda: unschedulable(kube, ns, "clash"), 30, "the clashing pod's condition")
    assert "1 node(s) didn't have free ports for the requested pod ports" in message
    assert not pods(kube, ns)["clash"]["spec"].get("nodeName")


def test_a_pod_mounting_a_missing_config_map_binds_once_it_exists(kube, scheduler, ns):
    pod(kube, ns, "app", volumes=[{"name": "cfg", "configMap": {"name": "settings"}}],
        containers=[{"name": "main", "image": "busybox", "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}],
                     "resources": {"requests": {"cpu": "100m"}}}])
    message = wait_until(lambda: unschedulable(kube, ns, "app"), 30, "the pod's PodScheduled=False condition")
    assert f"Scheduling conditions were not met for pod {ns}/app:\nConfigMap: Missing required configmaps: " \
           "[settings]." in message
    time.sleep(2)
    assert not pods(kube, ns)["app"]["spec"].get("nodeName")
    kube.post(f"/api/v1/namespaces/{ns}/configmaps",
              {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}})
    wait_until(lambda: running(kube, ns, "app"), 30, "the pod Running once its ConfigMap exists")
