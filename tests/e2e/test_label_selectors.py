"""KAI's ``global.podLabelSelector`` and ``global.namespaceLabelSelector`` on the real control plane: the
podgrouper (under the chart's ServiceAccount) groups only the pods they select, so only those are scheduled and
bound; a namespace that comes to match has its pods grouped at once. As in KAI, the scheduler and the binder
take no selector: a pod the podgrouper leaves alone has no PodGroup, and the scheduler never places such a pod.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from kai.kube.client import Kube, object_path
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def get_pod(kube: Kube, ns: str, name: str) -> dict:
    return kube.get(object_path("", "v1", "pods", ns, name))


def grouped(pod: dict) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get("pod-group-name")


@pytest.fixture
def run_id(kube: Kube):
    run = f"sel-{uuid.uuid4().hex[:6]}"
    yield run
    for ns in (f"{run}-in", f"{run}-out"):
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", body={"gracePeriodSeconds": 0})
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={run}"})


def test_only_selected_pods_in_selected_namespaces_are_grouped_and_scheduled(
        kube, kai_crds, kai_chart, kai_run, control_plane, component_kubeconfig, run_id):
    m.install(kube, DEPLOY)
    inside, outside = f"{run_id}-in", f"{run_id}-out"
    m.apply(kube, {**m.namespace(inside), "metadata": {"name": inside, "labels": {"kai-select": run_id}}})
    m.apply(kube, m.namespace(outside))
    m.apply(kube, m.gpu_node(f"{run_id}-node", gpus=4, labels={"e2e": run_id}))
    selected = {"kai-selected": "yes"}
    pods = {(inside, "chosen"): selected, (inside, "unlabelled"): {}, (outside, "elsewhere"): selected}
    for (ns, name), labels in pods.items():
        m.apply(kube, m.pod(ns, name, gpus=1, labels=labels, node_selector={"e2e": run_id}))
    grouper = kai_run(["--components", "podgrouper", "--pod-label-selector=kai-selected=yes",
                       f"--namespace-label-selector=kai-select={run_id}"],
                      component_kubeconfig("podgrouper"), name="selecting-podgrouper")
    scheduler = kai_run(["--components", "scheduler,binder"], control_plane.kubeconfig, name="selector-scheduler")
    try:
        wait_until(lambda: get_pod(kube, inside, "chosen")["spec"].get("nodeName"), 60, "the selected pod bound",
                   detail=grouper.log)
        time.sleep(3)  # several scheduling cycles and podgrouper passes
        for ns, name in ((inside, "unlabelled"), (outside, "elsewhere")):
            pod = get_pod(kube, ns, name)
            assert grouped(pod) is None and not pod["spec"].get("nodeName"), (ns, name)

        kube.patch(f"/api/v1/namespaces/{outside}", {"metadata": {"labels": {"kai-select": run_id}}})
        wait_until(lambda: get_pod(kube, outside, "elsewhere")["spec"].get("nodeName"), 60,
                   "the pod of the namespace that came to match bound", detail=grouper.log)
        assert grouped(get_pod(kube, inside, "unlabelled")) is None
    finally:
        assert grouper.terminate() == 0, grouper.log()[-3000:]
        assert scheduler.terminate() == 0, scheduler.log()[-3000:]
