"""``kai-scheduler run --shadow`` against the real control plane: it decides, writes nothing (its API requests
counted by verb), sets its decisions beside the BindRequests another scheduler makes, and lists the divergences
with both explanations -- its own and what the other scheduler wrote on the pods and PodGroups -- in the rolling
report and the visibility API."""

from __future__ import annotations

import json
import re

import pytest

from kai.kube.client import object_path
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"
#: What KAI wrote about a pod it left pending (its PodScheduled condition and its PodGroup's condition).
KAI_SAYS = "Resources were not found for 1 pods: node(s) didn't have enough GPUs"


def verbs(metrics: str) -> dict[str, float]:
    """``kai_api_requests_total`` by verb (summed over the resources)."""
    counted: dict[str, float] = {}
    for found in re.finditer(r'^kai_api_requests_total\{[^}]*verb="([A-Z]+)"[^}]*\} ([0-9.e+]+)$', metrics, re.M):
        counted[found.group(1)] = counted.get(found.group(1), 0.0) + float(found.group(2))
    return counted


def test_shadow_mode_writes_nothing_and_reports_what_kai_did_otherwise(kube, kai_chart, kai_run, control_plane, ns,
                                                                       tmp_path):
    selector = {"e2e": ns}
    for i in range(2):
        m.apply(kube, m.gpu_node(f"{ns}-n{i}", gpus=8, labels=selector))
    m.apply(kube, m.podgroup(ns, "gang", min_member=2))
    for i in range(2):
        m.apply(kube, m.pod(ns, f"gang-{i}", "gang", gpus=4, node_selector=selector))
    m.apply(kube, m.podgroup(ns, "huge"))
    m.apply(kube, m.pod(ns, "huge", "huge", gpus=16, node_selector=selector))
    m.apply(kube, m.podgroup(ns, "single"))
    m.apply(kube, m.pod(ns, "single", "single", gpus=1, node_selector=selector))
    # KAI (played by the test) left "single" pending, and said why on the pod and its PodGroup
    kube.patch(object_path("", "v1", "pods", ns, "single"), {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": KAI_SAYS}]}},
        subresource="status")
    kube.patch(object_path("scheduling.run.ai", "v2alpha2", "podgroups", ns, "single"), {"status": {
        "schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable",
                                  "message": KAI_SAYS, "status": "True", "transitionID": "0",
                                  "lastTransitionTime": "2026-01-05T10:00:30Z"}]}}, subresource="status")
    config = tmp_path / "config.yaml"
    config.write_text(f"actions: {ACTIONS}\n")
    report_file = tmp_path / "shadow.json"
    shadow = kai_run(["--shadow", "--config", str(config), "--shadow-report", str(report_file)],
                     control_plane.kubeconfig, name="shadow")

    def report() -> dict:
        status, body = shadow.get("/shadow-report")
        return json.loads(body) if status == 200 else {}

    wait_until(lambda: report().get("awaiting_kai", 0) >= 4, 60, "shadow mode's verdicts on the four pods")
    assert all(not p["spec"].get("nodeName") for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"])
    # another scheduler (KAI) binds the gang, one pod where shadow mode would not put it, and the huge pod
    ours = {p.get("metadata", {}).get("name") for p in kube.get(m.collection("BindRequest", ns)).get("items", [])}
    assert not ours, "shadow mode made no BindRequest"
    for name, node in (("gang-0", f"{ns}-n0"), ("gang-1", f"{ns}-n1"), ("huge", f"{ns}-n0")):
        pod = kube.get(object_path("", "v1", "pods", ns, name))
        m.apply(kube, {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                       "metadata": {"name": name, "namespace": ns, "ownerReferences": [
                           {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"]}]},
                       "spec": {"podName": name, "selectedNode": node, "receivedResourceType": "Regular",
                                "receivedGPU": {"count": 4, "portion": "1.00"}}})
    wait_until(lambda: sum(report().get("outcomes", {}).get(k, 0) for k in ("same node", "different node")) == 2,
               60, "both of the gang's pods compared")
    outcomes = report()["outcomes"]
    assert outcomes.get("same node", 0) + outcomes.get("different node", 0) == 2

    def listed(query: str = "") -> dict:
        status, body = shadow.get(f"/apis/visibility/v1/shadow{query}")
        return json.loads(body) if status == 200 else {}

    wanted = {f"{ns}/huge": "bound by KAI only", f"{ns}/single": "bound here only"}
    wait_until(lambda: wanted.items() <= {d["pod"]: d["outcome"] for d in listed().get("items", [])}.items(), 60,
               "the visibility API's entries for the pod KAI bound alone and the one it left pending")
    entries = {d["pod"]: d for d in listed()["items"]}
    huge, single = entries[f"{ns}/huge"], entries[f"{ns}/single"]
    assert (huge["here"], huge["kai"], huge["why_kai"]) == (None, f"{ns}-n0", None)
    assert huge["why_here"]["message"] and huge["why_here"]["details"]["kind"] in (
        "no-node-large-enough", "insufficient-resources")  # as other tests' nodes are, larger or not
    assert single["here"] in (f"{ns}-n0", f"{ns}-n1") and single["kai"] is None and single["why_here"] is None
    assert single["why_kai"]["pod"] == KAI_SAYS
    assert (single["why_kai"]["podgroup"]["reason"], single["why_kai"]["podgroup"]["message"]) == (
        "Unschedulable", KAI_SAYS)
    only = listed("?outcome=bound%20by%20KAI%20only&limit=10")
    assert [d["pod"] for d in only["items"]] == [f"{ns}/huge"] and only["outcomes"]["bound here only"] == 1
    status, body = shadow.get(f"/apis/visibility/v1/explain/{ns}/single")  # bound here: not pending in the view
    word = json.loads(body)["shadow"]
    assert status == 404 and [d["outcome"] for d in word["divergences"]] == ["bound here only"]
    written = json.loads(report_file.read_text())
    assert written["cycles"] >= 1
    assert {d["pod"]: d for d in written["divergences"]}[f"{ns}/single"]["why_kai"] == single["why_kai"]
    metrics = shadow.get("/metrics")[1]
    for outcome in ("bound here only", "bound by KAI only"):
        assert re.search(rf'^kai_shadow_decisions_total\{{outcome="{outcome}"\}} 1', metrics, re.M), outcome
    counted = verbs(metrics)
    assert counted.get("GET", 0) > 0
    assert set(counted) <= {"GET"}, f"shadow mode wrote to the API server: {counted}"
    assert not kube.get(f"/api/v1/namespaces/{ns}/events")["items"], "shadow mode recorded no event"
    assert shadow.terminate() == 0, shadow.log()[-3000:]
