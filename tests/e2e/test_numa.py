"""NUMA-aware placement against a real API server: NodeResourceTopology objects in, the chosen zones on the
pod, through the scheduler's own Binding (the pods need no bind-time work)."""

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


def test_guaranteed_pods_take_one_zone_each_and_their_binding_records_it(kube, numa_scheduler):
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
        def annotated():
            pods = items(kube, "Pod", ns)
            return all("kai.scheduler/numa-placement-predicted" in (pods[p]["metadata"].get("annotations") or {})
                       for p in ("a", "b"))

        wait_until(annotated, 60, "the predicted placement on the bound pods")
        pods = items(kube, "Pod", ns)
        placed = [json.loads(pods[p]["metadata"]["annotations"]["kai.scheduler/numa-placement-predicted"])
                  for p in ("a", "b")]
        assert sorted(z["zone"] for zones in placed for z in zones) == ["node-0", "node-1"]
        assert all(zones[0]["amount"] == {"cpu": "3"} for zones in placed)
        assert all(pods[p]["spec"]["nodeName"] == node for p in ("a", "b")) and items(kube, "BindRequest", ns) == {}
        pod_a = pods["a"]
        assert pod_a["status"]["qosClass"] == "Guaranteed"
        assert items(kube, "Pod", ns)["c"]["spec"].get("nodeName") is None
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", body={"gracePeriodSeconds": 0})
        kube.request("DELETE", f"{NRT_PATH}/{node}")
        kube.request("DELETE", f"/api/v1/nodes/{node}")
