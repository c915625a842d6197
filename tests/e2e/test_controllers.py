"""Real workloads on the local control plane: kube-controller-manager makes the pods of Jobs, Deployments
and StatefulSets, the scheduler, binder and podgrouper place them, and the garbage collectors clean up.

Each test works in its own namespace on its own kwok nodes (pods select them by label); the namespace
is deleted afterwards, and the namespace controller deletes what is in it.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from kai.kube.client import ApiError, object_path
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PODGROUPS = ("scheduling.run.ai", "v2alpha2", "podgroups")


def listed(kube, path: str, **params) -> dict[str, dict]:
    return {i["metadata"]["name"]: i for i in kube.get(path, params or None).get("items", [])}


def pods(kube, ns: str, **params) -> dict[str, dict]:
    return listed(kube, object_path("", "v1", "pods", ns), **params)


def gone(kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return False


def events(kube, ns: str, name: str) -> list[dict]:
    return [e for e in kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
            if e["involvedObject"]["name"] == name]


@pytest.fixture(scope="module")
def components(kube, kai_run, control_plane):
    """The scheduler, the binder and the podgrouper as one ``kai-scheduler run``."""
    m.install(kube, DEPLOY)
    proc = kai_run(["--components", "scheduler,binder,podgrouper"], control_plane.kubeconfig, name="controllers")
    wait_until(lambda: proc.get("/readyz")[0] == 200, timeout=60, what="the components ready")
    yield proc
    assert proc.terminate() == 0, proc.log()[-3000:]


@pytest.fixture(scope="module", autouse=True)
def stranded(kube):
    """A Running pod whose node is deleted before the module's first test, so that pod GC, which waits
    40 s for a node to come back and looks every 20 s, removes it while the other tests run.
    Yields ``(namespace, when the node was deleted)``."""
    ns = f"ctl-gc-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(ns))
    name = node(kube, ns, f"{ns}-gone", gpus=1)
    pod = m.pod(ns, "stranded", scheduler_name="nobody")
    pod["spec"]["nodeName"] = name  # placed directly: kwok runs it
    m.apply(kube, pod)
    wait_until(lambda: pods(kube, ns)["stranded"]["status"].get("phase") == "Running", timeout=60,
               what="the pod Running")
    kube.delete(f"/api/v1/nodes/{name}")
    yield ns, time.monotonic()
    kube.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture
def ns(kube):
    """A namespace for one test; it, its nodes and its queues (label ``e2e=<ns>``) are deleted afterwards."""
    name = f"ctl-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})
    kube.request("DELETE", m.collection("Queue"), {"labelSelector": f"e2e={name}"})


def node(kube, ns: str, name: str, gpus: int) -> str:
    m.apply(kube, m.gpu_node(name, gpus=gpus, labels={"e2e": ns}))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])),
               timeout=60, what=f"node {name} Ready")
    return name


def pod_template(ns: str, gpus: int = 1, **spec) -> dict:
    """A pod template for the scheduler on this test's nodes, asking ``gpus`` whole GPUs."""
    return {
        "metadata": {"labels": {"app": "e2e"}},
        "spec": {"schedulerName": "kai-scheduler", "nodeSelector": {"e2e": ns}, **spec,
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def create_job(kube, ns: str, name: str, parallelism: int) -> dict:
    """A batch/v1 Job of ``parallelism`` one-GPU pods that must run together (batch-min-member)."""
    return kube.post(object_path("batch", "v1", "jobs", ns), {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {"kai.scheduler/batch-min-member": str(parallelism)}},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "template": pod_template(ns, restartPolicy="Never")},
    })


def test_a_job_of_four_runs_as_one_gang_and_its_pods_go_with_it(kube, components, ns):
    node(kube, ns, f"{ns}-a", gpus=4)
    job = create_job(kube, ns, "train", parallelism=4)
    group = f"pg-train-{job['metadata']['uid']}"
    selector = {"labelSelector": "batch.kubernetes.io/job-name=train"}

    done = wait_until(lambda: (ps := pods(kube, ns, **selector)) and all(
        p["status"].get("phase") == "Succeeded" for p in ps.values()) and ps, timeout=60,
        what="the Job's pods bound and done")
    assert len(done) == 4  # made by the Job controller, not by hand
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in done.values()} == {group}
    assert {p["spec"]["nodeName"] for p in done.values()} == {f"{ns}-a"}
    pg = kube.get(object_path(*PODGROUPS, ns, group))
    assert pg["spec"]["minMember"] == 4
    assert pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    wait_until(lambda: kube.get(object_path("batch", "v1", "jobs", ns, "train"))["status"].get("succeeded") == 4,
               timeout=60, what="the Job controller counting four successes")

    kube.request("DELETE", object_path("batch", "v1", "jobs", ns, "train"), body={"propagationPolicy": "Background"})
    wait_until(lambda: not pods(kube, ns, **selector), timeout=60, what="the garbage collector deleting the Job's pods")
    # The garbage collector finds a new CRD's objects at its next discovery, every 30 s.
    wait_until(lambda: gone(kube, object_path(*PODGROUPS, ns, group)), timeout=120, what="the Job's PodGroup deleted")


def test_a_job_of_four_with_room_for_three_binds_none_until_there_is_room_for_all(kube, components, ns):
    node(kube, ns, f"{ns}-a", gpus=3)
    job = create_job(kube, ns, "wide", parallelism=4)
    group = f"pg-wide-{job['metadata']['uid']}"
    wait_until(lambda: len(ps := pods(kube, ns)) == 4 and all(
        p["metadata"].get("annotations", {}).get("pod-group-name") == group for p in ps.values()),
        timeout=60, what="the Job's four pods in its PodGroup")
    gang = "Resources were found for 3 pods while 4 are required for gang scheduling"
    wait_until(lambda: any(e["reason"] == "Unschedulable" and gang in e["message"] for e in events(kube, ns, group)),
               timeout=60, what="the gang's Unschedulable event")
    assert not [n for n, p in pods(kube, ns).items() if p["spec"].get("nodeName")]  # all or nothing

    node(kube, ns, f"{ns}-b", gpus=1)
    placed = wait_until(lambda: (ps := pods(kube, ns)) and all(p["spec"].get("nodeName") for p in ps.values()) and ps,
                        timeout=60, what="all four pods bound")
    assert sorted(p["spec"]["nodeName"] for p in placed.values()) == [f"{ns}-a"] * 3 + [f"{ns}-b"]


WORKLOADS = {
    "Deployment": {"replicas": 2, "selector": {"matchLabels": {"app": "e2e"}}},
    "StatefulSet": {"replicas": 2, "selector": {"matchLabels": {"app": "e2e"}}, "serviceName": "serve",
                    "podManagementPolicy": "Parallel"},
}


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
def test_the_pods_of_a_workload_controller_are_scheduled_and_collected_with_it(kube, components, ns, kind):
    node(kube, ns, f"{ns}-a", gpus=2)
    queue = m.queue(f"{ns}-serve", gpu_quota=2)  # a Deployment's pods are inference: not over quota
    queue["metadata"]["labels"] = {"e2e": ns}
    m.apply(kube, queue)
    plural = f"{kind.lower()}s"
    kube.post(object_path("apps", "v1", plural, ns), {
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": "serve", "labels": {"kai.scheduler/queue": f"{ns}-serve"}},
        "spec": {**WORKLOADS[kind], "template": pod_template(ns)},
    })
    running = wait_until(lambda: len(ps := pods(kube, ns)) == 2 and all(
        p["status"].get("phase") == "Running" for p in ps.values()) and ps, timeout=60,
        what=f"the {kind}'s two pods Running")
    assert all(p["metadata"]["annotations"].get("pod-group-name") for p in running.values())
    assert {p["spec"]["nodeName"] for p in running.values()} == {f"{ns}-a"}

    kube.request("DELETE", object_path("apps", "v1", plural, ns, "serve"), body={"propagationPolicy": "Background"})
    wait_until(lambda: not pods(kube, ns), timeout=60, what=f"the garbage collector deleting the {kind}'s pods")
    assert not listed(kube, object_path("apps", "v1", "replicasets", ns))


def test_a_resource_claim_template_gets_a_claim_per_pod(kube, ns):
    claims = ("resource.k8s.io", "v1")
    kube.post(object_path(*claims, "resourceclaimtemplates", ns), {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                                                    "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
    })
    pod = m.pod(ns, "claimer", scheduler_name="nobody")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    uid = kube.post(object_path("", "v1", "pods", ns), pod)["metadata"]["uid"]

    statuses = wait_until(lambda: pods(kube, ns)["claimer"]["status"].get("resourceClaimStatuses"),
                          timeout=60, what="the pod's generated ResourceClaim")
    assert [s["name"] for s in statuses] == ["gpu"]
    claim = kube.get(object_path(*claims, "resourceclaims", ns, statuses[0]["resourceClaimName"]))
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.example.com"
    assert [(o["kind"], o["uid"]) for o in claim["metadata"]["ownerReferences"]] == [("Pod", uid)]

    kube.delete(object_path("", "v1", "pods", ns, "claimer"))
    wait_until(lambda: not listed(kube, object_path(*claims, "resourceclaims", ns)),
               timeout=60, what="the claim deleted with its pod")


def test_the_pods_of_a_deleted_node_are_deleted(kube, stranded):
    ns, deleted = stranded
    wait_until(lambda: not pods(kube, ns), timeout=max(10.0, deleted + 180 - time.monotonic()),
               what="pod GC deleting the pod of a deleted node")
