"""What the scheduler writes, in KAI's shapes: the BindRequest or the Binding of a bind, the Eviction of a victim
pod, the objects its events are about, a PodGroup scheduling condition's reasons, and the times it records; and,
not KAI's, a pending PodGroup's dominant reason as an annotation."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import orjson

from kai.api import QueueDetails, Task, ZonePlacement, names
from kai.common.quantity import format_quantity
from kai.framework.reasons import Reason
from kai.kube import dra
from kai.kube.nrt import placement_json
from kai.kube.views import JsonObject, PodGroupView
from kai.scheduler.views import PodView


def rfc3339(seconds: float) -> str:
    """A time as KAI writes it in annotations and conditions (whole seconds, UTC)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def bind_request(pod: PodView, task: Task, node: str, gpu_groups: tuple[str, ...], gpu_memory_mib: int,
                 numa_zones: tuple[ZonePlacement, ...] = (), labels: dict[str, str] | None = None) -> JsonObject:
    """KAI's BindRequest for placing ``pod`` on ``node`` (shared GPUs on the devices ``gpu_groups``, the NUMA
    placement ``numa_zones`` the session chose), labelled also with ``labels`` (its scheduler's partition)."""
    kind, count, portion = received_gpu(task, gpu_memory_mib)
    spec: JsonObject = {
        "podName": pod.name,
        "selectedNode": node,
        "receivedResourceType": kind,
        "receivedGPU": {"count": count, "portion": f"{portion:.2f}"},
    }
    if gpu_groups:
        spec["selectedGPUGroups"] = list(gpu_groups)
    if numa_zones:
        spec["predictedNUMAZones"] = placement_json(numa_zones)
    if task.claim_allocations:
        spec["resourceClaimAllocations"] = [{"name": name, "allocation": dra.allocation_json(allocation)}
                                            for name, allocation in task.claim_allocations]
    if task.extended_claim is not None:
        spec["extendedResourceClaimAllocation"] = dra.extended_claim_json(task.extended_claim)
    return {
        "apiVersion": names.BINDREQUEST_API_VERSION,
        "kind": "BindRequest",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "labels": {"selected-node": node, **(labels or {})},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}],
        },
        "spec": spec,
    }


def received_gpu(task: Task, gpu_memory_mib: int) -> tuple[str, int, float]:
    """KAI's received resource type of ``task``'s GPUs, how many devices and the portion of each (a shared GPU
    asked by memory: of a device with ``gpu_memory_mib``)."""
    req = task.request
    if req.mig:
        return "MigInstance", 0, 0.0
    if req.is_shared_gpu:
        return "Fraction", req.gpu_devices, req.gpu_fraction or min(
            1.0, req.accepted_gpus(gpu_memory_mib) / req.gpu_devices)
    return "Regular", req.gpus, 1.0 if req.gpus else 0.0


def binding(pod: PodView, task: Task, node: str, gpu_memory_mib: int,
            numa_zones: tuple[ZonePlacement, ...] = ()) -> JsonObject:
    """The Binding of ``pod`` (this very pod: its UID) to ``node``, with the annotations the binder's would
    carry: the received resource type and the NUMA placement the session chose, which the API server copies
    onto the pod."""
    annotations = {names.RECEIVED_RESOURCE_TYPE: received_gpu(task, gpu_memory_mib)[0]}
    if numa_zones:
        annotations[names.NUMA_PLACEMENT_PREDICTED_ANNOTATION] = orjson.dumps(placement_json(numa_zones)).decode()
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def eviction(pod: PodView) -> JsonObject:
    """The ``policy/v1`` Eviction of ``pod`` (this very pod: a UID precondition)."""
    return {"apiVersion": names.EVICTION_API_VERSION, "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}}}


def eviction_refusal(status: JsonObject) -> str:
    """Why the API server refused an eviction (its 429 Status): the budget's causes, else its message."""
    causes = [str(c.get("message")) for c in (status.get("details") or {}).get("causes") or ()
              if isinstance(c, dict) and c.get("message")]
    return "; ".join(causes) or str(status.get("message") or "too many requests")


def pod_ref(pod: PodView) -> JsonObject:
    """The pod as the object of an event."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod.name, "namespace": pod.namespace,
                                                            "uid": pod.uid}}


def node_ref(name: str) -> JsonObject:
    """The node as the object of an event."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def podgroup_ref(pg: PodGroupView) -> JsonObject:
    """The PodGroup as the object of an event."""
    return {"apiVersion": names.PODGROUP_API_VERSION, "kind": "PodGroup",
            "metadata": {"name": pg.name, "namespace": pg.namespace, "uid": pg.uid}}


def condition_reason(reason: str, message: str, details: QueueDetails | None) -> JsonObject:
    """A PodGroup's ``schedulingConditions[].reasons[]`` entry, with KAI's ``details.queueDetails``."""
    entry: JsonObject = {"reason": reason, "message": message}
    if details is not None:
        entry["details"] = {"queueDetails": {
            "name": details.name,
            "queueRequestedResources": _resource_list(details.requested),
            "queueDeservedResources": _resource_list(details.deserved),
            "queueAllocatedResources": _resource_list(details.allocated),
            "queueAllocatedNonPreemptibleResources": _resource_list(details.allocated_non_preemptible),
            "queueResourceLimits": _resource_list(details.limits),
            "podGroupRequestedResources": _resource_list(details.job_requested),
            "podGroupRequestedNonPreemptibleResources": _resource_list(details.job_requested),
        }}
    return entry


def _resource_list(amounts: tuple[float, float, float]) -> dict[str, str]:
    """(CPU millicores, memory bytes, GPUs) as a ResourceList the way KAI writes it (a fraction of a GPU in
    millis, else whole GPUs; -1 unlimited)."""
    cpu, memory, gpus = amounts
    gpu = f"{int(gpus * 1000)}m" if 0 < gpus < 1 else str(int(gpus))
    return {"cpu": format_quantity(Decimal(int(cpu)) / 1000), "memory": str(int(memory)), names.GPU: gpu}


def pending_reason(reason: Reason) -> str:
    """The value of annotation ``kai.scheduler/pending-reason``: the reason's code and details as the visibility API
    serves them, as compact JSON."""
    return json.dumps({"code": reason.code, "details": reason.details}, separators=(",", ":"), sort_keys=True)
