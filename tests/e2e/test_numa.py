"""NUMA-aware placement against a real API server: NodeResourceTopology objects in, the chosen zones on the
BindRequest and, through the binder, on the pod."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

NRT_CRDS = Path(__file__).resolve().parent / "crds-numa"
NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
CONFIG = """actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"
tiers:
  - plugins: [predicates, proportion, priority, elastic, nodeavailability, taskorder, nodeplacement, numa]
"""


def items(kube, kind, ns) -> dict[str, dict]:
    return {i["metadata"]["name"]: i for i in kube.get(m.collection(kind, ns)).get("items", [])}


@pytest.fixture(scope="module")
def numa_scheduler(kube, kai_chart, kai_run, control_plane, apply_crds, tmp_path_factory):
    apply_crds(NRT_CRDS)  # before the scheduler starts: it asks once whether the API is served
    config = tmp_path_factory.mktemp("numa") / "config.yaml"
    config.write_text(CONFIG)
    proc = kai_run(["--config", str(config), "--components", "scheduler,binder"], control_plane.kubeconfig,
                   name="numa-scheduler")
    yield proc
    if proc.proc.poll() is None:
        assert proc.terminate() == 0, proc.log()[-3000:]


def guaranteed_pod(ns, name, cpu="3"):
    body = m.pod(ns, name, name, cpu=cpu, memory="1Gi", node_selector={"e2e": ns})
    body["spec"]["containers"][0]["resources"]["limits"] = {"cpu": cpu, "memory": "1Gi"}
    return body


def test_guaranteed_pods_take_one_zone_each_and_the_binder_records_it(kube, numa_scheduler):
    ns = f"e2e-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(ns))
    node = f"{ns}-n0"
    m.apply(kube, m.gpu_node(node, gpus=0, cpu="16", labels={"e2e": ns}))
    kube.post(NRT_PATH, {
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology", "metadata": {"name": node},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                       {"name": "topologyManagerScope", "value": "pod"}],
        "zones": [{"name": f"node-{i}", "type": "Node", "resources": [
            {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}]} for i in range(2)]})
    try:
        for name in ("a", "b", "c"):
            m.apply(kube, m.podgroup(ns, name, queue="default-queue"))
            m.apply(kube, guaranteed_pod(ns, name))
        wait_until(lambda: {"a", "b"} <= set(items(kube, "BindRequest", ns)), 60, "two BindRequests")
        binds = items(kube, "BindRequest", ns)
        zones = sorted(z["zone"] for b in binds.values() for z in b["spec"]["predictedNUMAZones"])
        assert zones == ["node-0", "node-1"] and "c" not in binds
        assert all(b["spec"]["predictedNUMAZones"][0]["amount"] == {"cpu": "3"} for b in binds.values())

        def annotated():
            pods = items(kube, "Pod", ns)
            return all("kai.scheduler/numa-placement-predicted" in (pods[p]["metadata"].get("annotations") or {})
                       for p in ("a", "b"))

        wait_until(annotated, 60, "the predicted placement on the bound pods")
        pod_a = items(kube, "Pod", ns)["a"]
        assert json.loads(pod_a["metadata"]["annotations"]["kai.scheduler/numa-placement-predicted"]) == \
            binds["a"]["spec"]["predictedNUMAZones"]
        assert pod_a["status"]["qosClass"] == "Guaranteed"
        assert items(kube, "Pod", ns)["c"]["spec"].get("nodeName") is None
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", body={"gracePeriodSeconds": 0})
        kube.request("DELETE", f"{NRT_PATH}/{node}")
        kube.request("DELETE", f"/api/v1/nodes/{node}")
