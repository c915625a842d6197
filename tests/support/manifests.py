"""Manifests of the objects a KAI cluster runs on, for the e2e tests, the benchmarks and the KAI e2e harness.

Builders return plain dicts ready to POST; :func:`apply` creates any of them at its collection;
:func:`install` creates KAI's CRDs (waiting until they are served), default queues and priority
classes from a ``deploy`` directory.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from kai.api import names
from kai.kube.client import ApiError, Kube, object_path

KWOK_NODE_LABEL = "type"
#: Kind -> (group, version, plural, namespaced) of the kinds these manifests create.
COLLECTIONS = {
    "Node": (*names.NODES, False),
    "Namespace": ("", "v1", "namespaces", False),
    "ServiceAccount": ("", "v1", "serviceaccounts", True),
    "Deployment": ("apps", "v1", "deployments", True),
    "ReplicaSet": ("apps", "v1", "replicasets", True),
    "Job": ("batch", "v1", "jobs", True),
    "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False),
    "MutatingWebhookConfiguration": ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False),
    "Pod": (*names.PODS, True),
    "PriorityClass": (*names.PRIORITYCLASSES, False),
    "CustomResourceDefinition": ("apiextensions.k8s.io", "v1", "customresourcedefinitions", False),
    "Queue": (*names.QUEUES, False),
    "PodGroup": (*names.PODGROUPS, True),
    "BindRequest": (*names.BINDREQUESTS, True),
    "Topology": (*names.TOPOLOGIES, False),
    "SchedulingShard": (*names.SCHEDULINGSHARDS, False),
    "Config": (*names.CONFIGS, False),
    "PodDisruptionBudget": (*names.PODDISRUPTIONBUDGETS, True),
    "DeviceClass": (*names.DEVICECLASSES, False),
    "ResourceSlice": (*names.RESOURCESLICES, False),
}


def collection(kind: str, namespace: str | None = None) -> str:
    """The REST path of ``kind``'s collection (in ``namespace`` for namespaced kinds)."""
    group, version, plural, namespaced = COLLECTIONS[kind]
    return object_path(group, version, plural, namespace if namespaced else None)


def apply(kube: Kube, obj: dict) -> bool:
    """Create ``obj``; False when an object of that name exists already (it is left as it is)."""
    try:
        kube.post(collection(obj["kind"], obj["metadata"].get("namespace")), obj)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return False
    return True


def install(kube: Kube, deploy: Path, timeout: float = 60.0) -> None:
    """KAI's CRDs (returns once they are served), default queues and priority classes."""
    crds = [yaml.safe_load(p.read_text()) for p in sorted((deploy / "crds").glob("*.yaml"))]
    for crd in crds:
        apply(kube, crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        path = object_path(spec["group"], version, spec["names"]["plural"])
        while not _served(kube, path):  # established, and its storage ready (no 429 any more)
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd['metadata']['name']} not served after {timeout:.0f}s")
            time.sleep(0.1)
    for name in ("default-queues.yaml", "priority-classes.yaml"):
        for doc in yaml.safe_load_all((deploy / name).read_text()):
            apply(kube, doc)


def _served(kube: Kube, path: str) -> bool:
    try:
        kube.get(path, {"limit": 1})
    except ApiError as exc:
        if exc.status in (404, 429, 503):
            return False
        raise
    return True


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def gpu_node(name: str, gpus: int = 8, cpu: str = "64", memory: str = "512Gi", pods: int = 110,
             labels: dict | None = None) -> dict:
    """A node for kwok (which makes it Ready) with ``gpus`` allocatable ``nvidia.com/gpu``."""
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {KWOK_NODE_LABEL: "kwok", "kubernetes.io/hostname": name,
                                              "nvidia.com/gpu.count": str(gpus), **(labels or {})}},
        "status": {"allocatable": resources, "capacity": resources},
    }


def queue(name: str, parent: str | None = None, gpu_quota: float = 0, gpu_limit: float = -1,
          over_quota_weight: float = 1, priority: int | None = None) -> dict:
    """A Queue with a GPU quota, and no CPU or memory quota or limit."""
    spec: dict = {"resources": {
        "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": over_quota_weight},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def podgroup(namespace: str, name: str, queue: str = "default-queue", min_member: int = 1,
             priority_class: str = "train") -> dict:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority_class},
    }


def pod(namespace: str, name: str, group: str | None = None, gpus: int = 0, cpu: str = "100m",
        memory: str = "128Mi", annotations: dict | None = None, labels: dict | None = None,
        node_selector: dict | None = None, scheduler_name: str = "kai-scheduler",
        priority_class: str | None = None) -> dict:
    """A pod for the scheduler, GPUs as an ``nvidia.com/gpu`` limit.

    With ``group`` it names its PodGroup (annotation ``pod-group-name``); without, the podgrouper
    gives it one (name its queue with the label ``kai.scheduler/queue``), of the pod's
    ``priority_class`` when it has one.
    """
    resources: dict = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    meta: dict = {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                  "annotations": dict(annotations or {})}
    if group:
        meta["annotations"]["pod-group-name"] = group
    spec: dict = {
        "schedulerName": scheduler_name,
        "nodeSelector": node_selector or {},
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_disruption_budget(namespace: str, name: str, min_available: int, labels: dict) -> dict:
    """A PodDisruptionBudget keeping ``min_available`` of the pods with ``labels`` available."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(labels)}}}
