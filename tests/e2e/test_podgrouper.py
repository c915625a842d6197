"""The podgrouper control loop against the real API server: workload CRDs, hand-made pods, PodGroups appear.

No controller runs for the workload CRDs: each test creates the owner object and the pods its
controller would create (with their ownerReferences and labels), and checks the PodGroup the loop
writes. A batch/v1 Job makes its pods itself (kube-controller-manager runs).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from kai.controllers.podgrouper import PodGrouper
from kai.kube.client import ApiError, Kube, object_path
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

PG = ("scheduling.run.ai", "v2alpha2", "podgroups")


@pytest.fixture(scope="module")
def podgrouper(kube, kai_crds, workload_crds):
    """The control loop, running in this process until the module's tests are done."""
    grouper = PodGrouper(kube, workers=2)
    stop = threading.Event()
    thread = threading.Thread(target=grouper.run, args=(stop,), daemon=True)
    thread.start()
    yield grouper
    stop.set()
    thread.join(15)
    assert not thread.is_alive()


@pytest.fixture
def ns(kube: Kube) -> str:
    name = f"pg-{uuid.uuid4().hex[:8]}"
    kube.post("/api/v1/namespaces", {"metadata": {"name": name}})
    return name


def create(kube: Kube, ns: str, api_version: str, kind: str, plural: str, name: str, spec: dict, **meta) -> dict:
    group, _, version = api_version.rpartition("/")
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}
    return kube.post(object_path(group, version, plural, ns), body)


def ref(owner: dict) -> dict:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True}


def make_pod(kube: Kube, ns: str, name: str, owner: dict | None, labels: dict | None = None, **meta) -> dict:
    body = {
        "metadata": {"name": name, "labels": labels or {}, "ownerReferences": [ref(owner)] if owner else [], **meta},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]},
    }
    return kube.post(object_path("", "v1", "pods", ns), body)


def podgroup(kube: Kube, ns: str, name: str) -> dict | None:
    try:
        return kube.get(object_path(*PG, ns, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def assigned(kube: Kube, ns: str, pod: str) -> tuple[str | None, str | None]:
    meta = kube.get(object_path("", "v1", "pods", ns, pod))["metadata"]
    return (meta.get("annotations") or {}).get("pod-group-name"), (meta.get("labels") or {}).get(
        "kai.scheduler/subgroup-name")


def subgroups(pg: dict) -> list[tuple[str, int]]:
    return [(s["name"], s["minMember"]) for s in pg["spec"].get("subGroups") or ()]


def warnings(kube: Kube, ns: str, pod: str) -> list[str]:
    events = kube.get(object_path("", "v1", "events", ns), {"fieldSelector": f"involvedObject.name={pod}"})
    return [e["message"] for e in events.get("items") or () if e.get("reason") == "PodGrouperWarning"]


def test_pytorchjob_master_and_workers_make_one_gang_with_subgroups(kube, podgrouper, ns):
    job = create(kube, ns, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "mnist",
                 {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {}},
                                          "Worker": {"replicas": 3, "template": {}}}},
                 labels={"kai.scheduler/queue": "team-a"})
    pods = {"mnist-master-0": "master", **{f"mnist-worker-{i}": "worker" for i in range(3)}}
    for name, role in pods.items():
        make_pod(kube, ns, name, job, {"training.kubeflow.org/replica-type": role,
                                       "training.kubeflow.org/replica-index": name[-1]})
    name = f"pg-mnist-{job['metadata']['uid']}"
    pg = wait_until(lambda: podgroup(kube, ns, name), what="the PyTorchJob's PodGroup")
    assert pg["spec"]["minMember"] == 4
    assert pg["spec"]["queue"] == "team-a"
    assert subgroups(pg) == [("master", 1), ("worker", 3)]
    assert pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    for pod, role in pods.items():
        wait_until(lambda pod=pod, role=role: assigned(kube, ns, pod) == (name, role), what=f"{pod} assigned")

    # grouping everything again changes nothing
    versions = {pod: kube.get(object_path("", "v1", "pods", ns, pod))["metadata"]["resourceVersion"] for pod in pods}
    pg_version = podgroup(kube, ns, name)["metadata"]["resourceVersion"]
    for pod in pods:
        assert podgrouper.group(kube.get(object_path("", "v1", "pods", ns, pod))) == {}
        podgrouper.queue.add(f"{ns}/{pod}")
    time.sleep(1.0)
    assert podgroup(kube, ns, name)["metadata"]["resourceVersion"] == pg_version
    assert {p: kube.get(object_path("", "v1", "pods", ns, p))["metadata"]["resourceVersion"] for p in pods} == versions


def test_raycluster_head_and_worker_group(kube, podgrouper, ns):
    cluster = create(kube, ns, "ray.io/v1", "RayCluster", "rayclusters", "ray",
                     {"headGroupSpec": {"template": {}},
                      "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 2, "template": {}}]})
    make_pod(kube, ns, "ray-head", cluster, {"ray.io/group": "headgroup", "ray.io/node-type": "head"})
    make_pod(kube, ns, "ray-gpu-0", cluster, {"ray.io/group": "gpu", "ray.io/node-type": "worker"})
    name = f"pg-ray-{cluster['metadata']['uid']}"
    pg = wait_until(lambda: podgroup(kube, ns, name), what="the RayCluster's PodGroup")
    assert pg["spec"]["minMember"] == 3
    assert subgroups(pg) == [("headgroup", 1), ("gpu", 2)]
    wait_until(lambda: assigned(kube, ns, "ray-head") == (name, "headgroup"), what="the head assigned")
    wait_until(lambda: assigned(kube, ns, "ray-gpu-0") == (name, "gpu"), what="the worker assigned")


def test_jobset_one_gang_with_a_subgroup_per_replica_through_its_jobs(kube, podgrouper, ns):
    jobset = create(kube, ns, "jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", "train",
                    {"replicatedJobs": [
                        {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
                        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "completions": 2}}},
                    ]})
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": "workers", "jobset.sigs.k8s.io/job-index": "1"}
    job_spec = {"template": {"metadata": {"labels": labels},
                             "spec": {"restartPolicy": "Never", "schedulerName": "kai-scheduler",
                                      "containers": [{"name": "m", "image": "busybox"}]}}}
    create(kube, ns, "batch/v1", "Job", "jobs", "train-workers-1", job_spec, ownerReferences=[ref(jobset)])
    name = f"pg-train-{jobset['metadata']['uid']}"
    pg = wait_until(lambda: podgroup(kube, ns, name), what="the JobSet's PodGroup")
    leaves = [(s["name"], s.get("parent"), s.get("minMember")) for s in pg["spec"]["subGroups"] if s.get("parent")]
    assert leaves == [("leader-replica-0", "leader", 1), ("workers-replica-0", "workers", 2),
                      ("workers-replica-1", "workers", 2)]
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    pods = kube.get(object_path("", "v1", "pods", ns),
                    {"labelSelector": "batch.kubernetes.io/job-name=train-workers-1"})
    (pod,) = [p["metadata"]["name"] for p in pods["items"]]  # the Job controller's
    wait_until(lambda: assigned(kube, ns, pod) == (name, "workers-replica-1"), what="the pod assigned")


def test_leaderworkerset_group_with_leader_and_workers(kube, podgrouper, ns):
    lws = create(kube, ns, "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets", "serve",
                 {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "leaderTemplate": {}, "workerTemplate": {}}})
    index = {"leaderworkerset.sigs.k8s.io/group-index": "1"}
    make_pod(kube, ns, "serve-1", lws, {**index, "leaderworkerset.sigs.k8s.io/worker-index": "0"})
    make_pod(kube, ns, "serve-1-2", lws, {**index, "leaderworkerset.sigs.k8s.io/worker-index": "2"})
    name = f"pg-serve-{lws['metadata']['uid']}-group-1"
    pg = wait_until(lambda: podgroup(kube, ns, name), what="the LeaderWorkerSet group's PodGroup")
    assert pg["spec"]["minMember"] == 4
    assert subgroups(pg) == [("leader", 1), ("workers", 3)]
    wait_until(lambda: assigned(kube, ns, "serve-1") == (name, "leader"), what="the leader assigned")
    wait_until(lambda: assigned(kube, ns, "serve-1-2") == (name, "workers"), what="the worker assigned")


def customjob_karta(name: str) -> dict:
    """The Karta of KAI's Karta e2e suite (customjob_karta.yaml): coordinator and worker sub-groups."""
    def component(role: str) -> dict:
        return {"name": role, "ownerRef": "customjob",
                "specDefinition": {"podTemplateSpecPath": f".spec.{role}.template"},
                "scaleDefinition": {"replicasPath": f".spec.{role}.replicas"},
                "podSelector": {"componentTypeSelector": {"keyPath": '.metadata.labels["e2e.example.com/role"]',
                                                          "value": role}}}
    kind = {"group": "e2e.example.com", "version": "v1", "kind": "CustomJob"}
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta",
            "metadata": {"name": name, "labels": {"run.ai/karta-group": kind["group"],
                                                  "run.ai/karta-version": kind["version"],
                                                  "run.ai/karta-kind": kind["kind"]}},
            "spec": {"structureDefinition": {"rootComponent": {"name": "customjob", "kind": kind,
                                                               "statusDefinition": {"statusMappings": {}}},
                                             "childComponents": [component("coordinator"), component("worker")]},
                     "optimizationInstructions": {"gangScheduling": {"podGroup": {
                         "name": "customjob",
                         "subGroups": [{"componentName": "coordinator"}, {"componentName": "worker"}]}}}}}


def test_a_kind_without_podgrouper_is_grouped_by_its_karta(kube, podgrouper, ns):
    """KAI's Karta e2e spec: a CustomJob's pods form the PodGroup its Karta describes, listed while grouping."""
    karta = kube.post(object_path("run.ai", "v1alpha1", "kartas"), customjob_karta(f"customjob-{ns}"))
    try:
        job = create(kube, ns, "e2e.example.com/v1", "CustomJob", "customjobs", "custom-job",
                     {"coordinator": {"replicas": 1, "template": {"spec": {}}},
                      "worker": {"replicas": 2, "template": {"spec": {}}}},
                     labels={"kai.scheduler/queue": "team-a"})
        pods = {"custom-job-coordinator-0": "coordinator", "custom-job-worker-0": "worker",
                "custom-job-worker-1": "worker"}
        for pod, role in pods.items():
            make_pod(kube, ns, pod, job, {"e2e.example.com/role": role})
        name = f"pg-{job['metadata']['uid']}-customjob"
        pg = wait_until(lambda: podgroup(kube, ns, name), what="the CustomJob's PodGroup")
        assert "minMember" not in pg["spec"] and pg["spec"]["minSubGroup"] == 2
        assert pg["spec"]["queue"] == "team-a"
        assert sorted(subgroups(pg)) == [("coordinator", 1), ("worker", 2)]
        (owner,) = pg["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"]) == (
            "e2e.example.com/v1", "CustomJob", "custom-job", job["metadata"]["uid"])
        for pod, role in pods.items():
            wait_until(lambda pod=pod, role=role: assigned(kube, ns, pod) == (name, role), what=f"{pod} assigned")
    finally:
        kube.delete(object_path("run.ai", "v1alpha1", "kartas", None, karta["metadata"]["name"]))


def test_a_pod_whose_owner_is_gone_gets_one_event_naming_the_owner(kube, podgrouper, ns):
    ghost = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "vanished", "uid": str(uuid.uuid4())}}
    # The garbage collector deletes a pod whose owners are all gone, but leaves it alone while it cannot
    # look one of them up: a second owner of a kind nobody serves keeps the pod for the podgrouper.
    unserved = {"apiVersion": "example.kai.test/v1", "kind": "Gadget", "name": "g", "uid": str(uuid.uuid4())}
    make_pod(kube, ns, "orphan", ghost, ownerReferences=[ref(ghost), unserved])
    messages = wait_until(lambda: warnings(kube, ns, "orphan"), what="a PodGrouperWarning event")
    assert "PyTorchJob" in messages[0] and "vanished" in messages[0] and "not found" in messages[0]
    time.sleep(3.5)  # retried meanwhile (1 s, 2 s): the same reason is not reported again
    assert len(warnings(kube, ns, "orphan")) == 1
    assert assigned(kube, ns, "orphan") == (None, None)


def test_a_pod_owned_by_a_kind_nobody_serves_gets_an_event(kube, podgrouper, ns):
    owner = {"apiVersion": "example.kai.test/v1", "kind": "Gadget", "metadata": {"name": "g", "uid": "u-1"}}
    make_pod(kube, ns, "gadget-0", owner)
    messages = wait_until(lambda: warnings(kube, ns, "gadget-0"), what="a PodGrouperWarning event")
    assert "Gadget" in messages[0] and "example.kai.test/v1" in messages[0]


def test_a_deleted_podgroup_is_made_again(kube, podgrouper, ns):
    job = create(kube, ns, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "again",
                 {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {}}}})
    make_pod(kube, ns, "again-worker-0", job, {"training.kubeflow.org/replica-type": "worker"})
    name = f"pg-again-{job['metadata']['uid']}"
    first = wait_until(lambda: podgroup(kube, ns, name), what="the PodGroup")
    kube.delete(object_path(*PG, ns, name))
    second = wait_until(lambda: (pg := podgroup(kube, ns, name)) and pg["metadata"]["uid"] != first["metadata"]["uid"]
                        and pg, what="the PodGroup made again")
    assert second["spec"]["minMember"] == 2


def test_skip_podgrouper_on_a_pod_or_an_owner_leaves_them_alone(kube, podgrouper, ns):
    skip = {"kai.scheduler/skip-podgrouper": "true"}
    make_pod(kube, ns, "bare-skipped", None, annotations=skip)
    job = create(kube, ns, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "skipped",
                 {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {}}}}, annotations=skip)
    make_pod(kube, ns, "skipped-worker-0", job, {"training.kubeflow.org/replica-type": "worker"})
    versions = {pod: kube.get(object_path("", "v1", "pods", ns, pod))["metadata"]["resourceVersion"]
                for pod in ("bare-skipped", "skipped-worker-0")}
    # the same pods without the annotation, made after them, are grouped: the loop has seen the skipped ones
    control = create(kube, ns, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "grouped",
                     {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {}}}})
    make_pod(kube, ns, "grouped-worker-0", control, {"training.kubeflow.org/replica-type": "worker"})
    make_pod(kube, ns, "bare-grouped", None)
    wait_until(lambda: assigned(kube, ns, "grouped-worker-0")[0] and assigned(kube, ns, "bare-grouped")[0],
               what="the control pods assigned")
    time.sleep(1.0)
    pgs = kube.get(object_path(*PG, ns))["items"]
    owners = sorted(o["name"] for pg in pgs for o in pg["metadata"].get("ownerReferences") or ())
    assert owners == ["bare-grouped", "grouped"]
    for pod, version in versions.items():
        assert assigned(kube, ns, pod) == (None, None)
        assert kube.get(object_path("", "v1", "pods", ns, pod))["metadata"]["resourceVersion"] == version
        assert warnings(kube, ns, pod) == []
