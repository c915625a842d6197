"""The podgrouper inside ``kai-scheduler run``: a pip-installed third-party podgrouper, and a PyTorchJob scheduled
as one gang from its hand-made pods to bound pods.
"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from kai.kube.client import ApiError, Kube, object_path
from support import manifests as m
from support.waiting import wait_until
from support.wheel import environment, install, wheel

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DIST = "kai-sweep-test-podgrouper"
MODULE = "kai_sweep_test_podgrouper"

SWEEP_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sweeps.tuning.example.com
spec:
  group: tuning.example.com
  scope: Namespaced
  names: {kind: Sweep, listKind: SweepList, plural: sweeps, singular: sweep}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


def podgroup(kube: Kube, ns: str, name: str) -> dict | None:
    try:
        return kube.get(object_path("scheduling.run.ai", "v2alpha2", "podgroups", ns, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


@pytest.fixture
def ns(kube: Kube):
    name = f"run-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})


@pytest.fixture
def sweep_podgrouper(tmp_path, apply_crds, sweep_podgrouper_source):
    """The environment of a process that has the docs' Sweep podgrouper installed with pip (into a folder of its
    own); its CRD is applied."""
    site = install(wheel(tmp_path, DIST, {f"{MODULE}.py": sweep_podgrouper_source},
                         f"[kai.podgroupers]\nsweep = {MODULE}:build\n"), tmp_path / "site")
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "sweep.yaml").write_text(textwrap.dedent(SWEEP_CRD))
    apply_crds(tmp_path / "crds")
    return environment(site)


def test_a_pip_installed_podgrouper_groups_pods_of_its_kind_in_the_live_loop(kube, kai_crds, sweep_podgrouper,
                                                                             kai_run, control_plane, ns):
    proc = kai_run(["--components", "podgrouper"], control_plane.kubeconfig, name="podgrouper", env=sweep_podgrouper)
    sweep = kube.post(object_path("tuning.example.com", "v1", "sweeps", ns),
                      {"apiVersion": "tuning.example.com/v1", "kind": "Sweep", "metadata": {"name": "lr-search"},
                       "spec": {"parallelTrials": 4, "queue": "research"}})
    owner = {"apiVersion": "tuning.example.com/v1", "kind": "Sweep", "name": "lr-search",
             "uid": sweep["metadata"]["uid"]}
    pod = m.pod(ns, "lr-search-trial-7")  # no pod-group-name: the podgrouper names it
    pod["metadata"]["ownerReferences"] = [owner]
    m.apply(kube, pod)
    name = f"pg-lr-search-{sweep['metadata']['uid']}"
    try:
        pg = wait_until(lambda: podgroup(kube, ns, name), what="the Sweep's PodGroup")
        assert (pg["spec"]["minMember"], pg["spec"]["queue"]) == (4, "research")
        assert pg["metadata"]["ownerReferences"][0]["kind"] == "Sweep"
        wait_until(lambda: (kube.get(object_path("", "v1", "pods", ns, "lr-search-trial-7"))
                            ["metadata"].get("annotations", {}).get("pod-group-name")) == name,
                   what="the pod's annotation")
    finally:
        assert proc.terminate() == 0, proc.log()[-3000:]
    assert "podgrouper started" in proc.log()


def events(kube: Kube, ns: str) -> list[dict]:
    return kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])


def node(kube: Kube, ns: str, name: str, gpus: int) -> None:
    m.apply(kube, m.gpu_node(name, gpus=gpus, labels={"e2e": ns}))
    wait_until(lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])),
        what=f"node {name} Ready")


def test_pytorchjob_waits_whole_for_room_then_binds_whole(kube, workload_crds, kai_run, control_plane, ns):
    m.install(kube, DEPLOY)
    node(kube, ns, f"{ns}-a", gpus=3)
    proc = kai_run(["--components", "scheduler,binder,podgrouper"], control_plane.kubeconfig, name="pytorchjob")
    job = kube.post(object_path("kubeflow.org", "v1", "pytorchjobs", ns),
                    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert"},
                     "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}})
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert", "uid": job["metadata"]["uid"],
             "controller": True}
    names = {"bert-master-0": "master", "bert-worker-0": "worker", "bert-worker-1": "worker",
             "bert-worker-2": "worker"}
    for name, role in names.items():
        pod = m.pod(ns, name, "", gpus=1, node_selector={"e2e": ns})
        pod["metadata"]["annotations"] = {}
        pod["metadata"]["labels"] = {"training.kubeflow.org/replica-type": role}
        pod["metadata"]["ownerReferences"] = [owner]
        m.apply(kube, pod)
    group = f"pg-bert-{job['metadata']['uid']}"
    try:
        pg = wait_until(lambda: podgroup(kube, ns, group), what="the PyTorchJob's PodGroup")
        assert pg["spec"]["minMember"] == 4
        # room for 3 of the 4: the scheduler says the gang (its worker sub-group) cannot be completed, and why
        gang = ("Resources were found for 3 pods from all sub-groups while sub-group worker requires 3 pods for "
                "gang scheduling")
        (event, *_) = wait_until(lambda: [
            e for e in events(kube, ns) if e["involvedObject"]["name"] == group and e["reason"] == "Unschedulable"
            and gang in e["message"]], what="the gang's Unschedulable event")
        assert "didn't have enough resources: GPUs" in event["message"]
        pods = kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        assert not [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")]  # none bound: all or nothing

        node(kube, ns, f"{ns}-b", gpus=3)
        wait_until(lambda: all(
            p["spec"].get("nodeName") for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]), timeout=60,
            what="all four pods bound")
        pods = {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]}
        assert {n: p["metadata"]["labels"]["kai.scheduler/subgroup-name"] for n, p in pods.items()} == names
        assert {p["metadata"]["annotations"]["pod-group-name"] for p in pods.values()} == {group}
    finally:
        assert proc.terminate() == 0, proc.log()[-3000:]
