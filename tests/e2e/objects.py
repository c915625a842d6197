"""Objects for end-to-end tests: KAI's CRDs and defaults, kwok GPU nodes, PodGroups and their pods."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import yaml

from kai.cluster.client import ApiError, Kube, object_path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PODGROUPS = ("scheduling.run.ai", "v2alpha2", "podgroups")
QUEUES = ("scheduling.run.ai", "v2", "queues")
BIND_REQUESTS = ("scheduling.run.ai", "v1alpha2", "bindrequests")


def wait_until(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def create(kube: Kube, path: str, body: dict) -> dict:
    """POST ``body``; an existing object of that name is left as it is."""
    try:
        return kube.post(path, body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return {}


def _collection(obj: dict) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"CustomResourceDefinition": "customresourcedefinitions", "PriorityClass": "priorityclasses",
              "Queue": "queues"}[obj["kind"]]
    return object_path(group, version, plural)


def install_kai(kube: Kube) -> None:
    """KAI's CRDs (waiting until established), default queues and priority classes."""
    crds = [yaml.safe_load(p.read_text()) for p in sorted((DEPLOY / "crds").glob("*.yaml"))]
    for crd in crds:
        create(kube, _collection(crd), crd)
    for crd in crds:
        path = object_path("apiextensions.k8s.io", "v1", "customresourcedefinitions", name=crd["metadata"]["name"])
        wait_until(lambda path=path: any(c["type"] == "Established" and c["status"] == "True"
                                         for c in kube.get(path).get("status", {}).get("conditions", [])),
                   what=f"CRD {crd['metadata']['name']} established")
    for name in ("default-queues.yaml", "priority-classes.yaml"):
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            create(kube, _collection(doc), doc)


def namespace(kube: Kube, prefix: str = "e2e") -> str:
    ns = unique(prefix)
    kube.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    return ns


def gpu_node(kube: Kube, name: str, gpus: int = 8, cpu: str = "32", memory: str = "256Gi",
             labels: dict | None = None) -> str:
    """A kwok-managed node with ``gpus`` nvidia.com/gpu allocatable; returns once it is Ready."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    kube.post("/api/v1/nodes", {
        "metadata": {"name": name, "labels": {"type": "kwok", "nvidia.com/gpu.count": str(gpus), **(labels or {})}},
        "status": {"allocatable": resources, "capacity": resources},
    })
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])),
               what=f"node {name} Ready")
    return name


def queue(kube: Kube, name: str, parent: str | None = None, gpu_quota: float = 0, gpu_limit: float = -1,
          weight: float = 1, priority: int | None = None) -> str:
    spec: dict = {"resources": {
        "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": weight},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    kube.post(object_path(*QUEUES), {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                     "metadata": {"name": name}, "spec": spec})
    return name


def podgroup(kube: Kube, ns: str, name: str, queue: str = "default-queue", min_member: int = 1,
             priority_class: str = "train") -> str:
    kube.post(object_path(*PODGROUPS, ns), {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority_class},
    })
    return name


def pod(kube: Kube, ns: str, name: str, group: str, gpus: int = 0, cpu: str = "100m", memory: str = "128Mi",
        annotations: dict | None = None) -> str:
    """A pod of PodGroup ``group`` for kai-scheduler."""
    requests = {"cpu": cpu, "memory": memory}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    kube.post(f"/api/v1/namespaces/{ns}/pods", {
        "metadata": {"name": name, "namespace": ns, "annotations": {"pod-group-name": group, **(annotations or {})}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": limits}}],
        },
    })
    return name


def pods(kube: Kube, ns: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])}


def events(kube: Kube, ns: str, name: str | None = None) -> list[dict]:
    items = kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
    return [e for e in items if name is None or e["involvedObject"]["name"] == name]
