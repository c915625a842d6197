"""``kai-scheduler run --shadow`` against the real control plane: it decides, writes nothing (its API requests
counted by verb), and sets its decisions beside the BindRequests another scheduler makes."""

from __future__ import annotations

import json
import re

import pytest

from kai.kube.client import object_path
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"


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
    config = tmp_path / "config.yaml"
    config.write_text(f"actions: {ACTIONS}\n")
    report_file = tmp_path / "shadow.json"
    shadow = kai_run(["--shadow", "--config", str(config), "--shadow-report", str(report_file)],
                     control_plane.kubeconfig, name="shadow")

    def report() -> dict:
        status, body = shadow.get("/shadow-report")
        return json.loads(body) if status == 200 else {}

    wait_until(lambda: report().get("awaiting_kai", 0) >= 3, 60, "shadow mode's verdicts on the three pods")
    assert all(not p["spec"].get("nodeName") for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"])
    # another scheduler (KAI) binds the gang, one pod where shadow mode would not put it
    ours = {p.get("metadata", {}).get("name") for p in kube.get(m.collection("BindRequest", ns)).get("items", [])}
    assert not ours, "shadow mode made no BindRequest"
    for i, node in enumerate((f"{ns}-n0", f"{ns}-n1")):
        pod = kube.get(object_path("", "v1", "pods", ns, f"gang-{i}"))
        m.apply(kube, {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                       "metadata": {"name": f"gang-{i}", "namespace": ns, "ownerReferences": [
                           {"apiVersion": "v1", "kind": "Pod", "name": f"gang-{i}", "uid": pod["metadata"]["uid"]}]},
                       "spec": {"podName": f"gang-{i}", "selectedNode": node, "receivedResourceType": "Regular",
                                "receivedGPU": {"count": 4, "portion": "1.00"}}})
    wait_until(lambda: sum(report().get("outcomes", {}).get(k, 0) for k in ("same node", "different node")) == 2,
               60, "both of the gang's pods compared")
    outcomes = report()["outcomes"]
    assert outcomes.get("same node", 0) + outcomes.get("different node", 0) == 2
    assert json.loads(report_file.read_text())["cycles"] >= 1
    counted = verbs(shadow.get("/metrics")[1])
    assert counted.get("GET", 0) > 0
    assert set(counted) <= {"GET"}, f"shadow mode wrote to the API server: {counted}"
    assert not kube.get(f"/api/v1/namespaces/{ns}/events")["items"], "shadow mode recorded no event"
    assert shadow.terminate() == 0, shadow.log()[-3000:]
