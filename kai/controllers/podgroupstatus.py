"""The podgroup controller: each PodGroup's ``status.resourcesStatus``, summed over its pods as KAI does.

A pod belongs to the PodGroup its annotation ``pod-group-name`` names, in its namespace. Per pod:

* ``requested`` (pods Pending or Running): the containers' requests, plus a shared GPU request
  (``nvidia.com/gpu`` = ``gpu-fraction`` x ``gpu-fraction-num-devices``; ``run.ai/gpu.memory`` =
  ``gpu-memory`` x devices);
* ``allocated`` (pods Running, or Pending with condition PodScheduled=True): the containers'
  requests, plus for a pod that received a fraction (annotation ``received-resource-type:
  Fraction``) its ``gpu-fraction``, or its ``gpu-memory`` over the node's GPU memory (node label
  ``nvidia.com/gpu.memory``, MiB).

A pod's ResourceClaims add, to both, the devices their requests of GPU device classes ask for (KAI v0.17:
a class whose name contains ``gpu``), under the device class's name (``gpu.nvidia.com: 2``); claims are
read from a watch of ResourceClaims (none when the cluster does not serve ``resource.k8s.io/v1``).

``allocatedNonPreemptible`` equals ``allocated`` for a non-preemptible PodGroup (the scheduler's
rule: ``spec.preemptibility``, else priority below 100 is preemptible). The status is written only
when it changed. The queue controller sums these into Queue status.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from kai.api import names
from kai.api.dra import ResourceClaim
from kai.api.names import (
    GPU,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    GPU_MEMORY_RESOURCE,
    POD_GROUP_ANNOTATION,
    RECEIVED_RESOURCE_TYPE,
)
from kai.api.resources import GpuRequestError, gpu_memory_from_label, parse_gpu_sharing
from kai.common.quantity import QuantityError, format_resources, parse, resource_list_patch, sum_resources
from kai.kube import dra, views
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.controller import Controller
from kai.kube.watch import Informer, object_key
from kai.logs import fields

log = logging.getLogger(__name__)

GROUP, _, PLURAL = names.PODGROUPS
RETRY_DELAY = 5.0

#: Every API call below (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access("", "pods", ("list", "watch")),
    Access("", "nodes", ("get",)),
    Access(GROUP, PLURAL, ("list", "watch")),
    Access(GROUP, f"{PLURAL}/status", ("patch",)),
    Access("scheduling.k8s.io", "priorityclasses", ("list", "watch")),
    Access(names.RESOURCECLAIMS[0], names.RESOURCECLAIMS[2], ("list", "watch")),
)


def slim_pod(raw: dict[str, Any]) -> dict[str, Any] | None:
    """What the controller keeps of a pod: its group, phase, placement, requests and GPU-sharing annotations;
    None for a pod of no PodGroup."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    group = annotations.get(POD_GROUP_ANNOTATION)
    if not group:
        return None
    return {
        "key": object_key(raw), "group": f"{meta.get('namespace', '')}/{group}",
        "phase": status.get("phase") or "Pending", "node": spec.get("nodeName") or "",
        "scheduled": any(c.get("type") == "PodScheduled" and c.get("status") == "True"
                         for c in status.get("conditions") or ()),
        "requests": [(c.get("resources") or {}).get("requests") or {} for c in spec.get("containers") or ()],
        "annotations": {k: annotations[k] for k in (GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES,
                                                    RECEIVED_RESOURCE_TYPE) if k in annotations},
        "claims": tuple(f"{meta.get('namespace', '')}/{c.claim}" for c in dra.pod_resource_claims(spec, status)
                        if c.claim),
    }


def claim_gpus(claims: Iterable[ResourceClaim]) -> dict[str, Decimal]:
    """The GPUs ResourceClaims ask for, by GPU device class name (KAI's ``DRAGPUResourceListFromClaims``)."""
    out: dict[str, Decimal] = {}
    for claim in claims:
        for request in claim.requests:
            if request.gpus:
                out[request.device_class] = out.get(request.device_class, Decimal(0)) + request.gpus
    return out


def slim_podgroup(raw: dict[str, Any]) -> tuple[views.PodGroupView, dict]:
    """The scheduler's view of a PodGroup (priority, preemptibility) and its current resource status."""
    return views.podgroup_view(raw), (raw.get("status") or {}).get("resourcesStatus") or {}


def pod_resources(pod: dict[str, Any], node_gpu_memory_mib,
                  claims: Iterable[ResourceClaim] = ()) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """``(requested, allocated)`` of one slim pod with its ResourceClaims ``claims``; ``node_gpu_memory_mib(node)``
    reads a node's GPU memory. Raises QuantityError or GpuRequestError for a pod whose requests cannot be read."""
    base = sum_resources([*pod["requests"], claim_gpus(claims)])
    requested: dict[str, Decimal] = {}
    allocated: dict[str, Decimal] = {}
    annotations = pod["annotations"]
    if pod["phase"] in ("Pending", "Running"):
        fraction, devices, memory = parse_gpu_sharing(annotations)
        shared = {}
        if fraction:
            shared[GPU] = Decimal(str(fraction)) * devices
        if memory:
            shared[GPU_MEMORY_RESOURCE] = Decimal(memory) * devices
        requested = sum_resources([base, shared])
    if pod["phase"] == "Running" or (pod["phase"] == "Pending" and pod["scheduled"]):
        received = {}
        if annotations.get(RECEIVED_RESOURCE_TYPE) == "Fraction":
            received[GPU] = _received_fraction(annotations, pod["node"], node_gpu_memory_mib)
        allocated = sum_resources([base, received])
    return requested, allocated


def _received_fraction(annotations: dict[str, str], node: str, node_gpu_memory_mib) -> Decimal:
    if GPU_FRACTION in annotations:
        return parse(annotations[GPU_FRACTION])
    if GPU_MEMORY not in annotations:
        raise GpuRequestError(RECEIVED_RESOURCE_TYPE, "received a fraction but has no gpu-fraction or gpu-memory")
    per_device = node_gpu_memory_mib(node)
    if not per_device:
        raise GpuRequestError(GPU_MEMORY, f"node {node} has no {GPU_MEMORY_LABEL} label to turn gpu-memory into "
                                          "a fraction")
    return parse(annotations[GPU_MEMORY]) / Decimal(per_device)


class PodGroupController(Controller):
    """Keeps PodGroup ``status.resourcesStatus`` current; ``run(stop)`` blocks until ``stop`` is set."""

    name = "podgroup-controller"
    key_field = "podgroup"
    wait_for_sync = True  # a partial pod list would be written as truth

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, error_delay=RETRY_DELAY)
        self._lock = threading.Lock()
        self._pod_group: dict[str, str] = {}  # pod key -> PodGroup key
        self._by_group: dict[str, set[str]] = defaultdict(set)  # PodGroup key -> pod keys
        self._by_claim: dict[str, set[str]] = defaultdict(set)  # ResourceClaim key -> PodGroup keys

    # -- events --------------------------------------------------------------------------------
    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key, group = pod["key"], pod["group"]
        with self._lock:
            former = self._pod_group.pop(key, "")
            self._by_group[former].discard(key)
            if kind != "DELETED":
                self._pod_group[key] = group
                self._by_group[group].add(key)
                for claim in pod["claims"]:
                    self._by_claim[claim].add(group)
        for name in {group, former} - {""}:
            self.queue.add(name)

    def on_claim(self, kind: str, claim) -> None:
        key = claim.key  # a claim, or an Unreadable one
        with self._lock:
            groups = set(self._by_claim.get(key, ()))
            if kind == "DELETED":
                self._by_claim.pop(key, None)
        for group in groups:
            self.queue.add(group)

    def on_podgroup(self, kind: str, pg: tuple[views.PodGroupView, dict]) -> None:
        if kind != "DELETED":
            self.queue.add(pg[0].key)

    def on_priority_class(self, kind: str, _cls: Any) -> None:
        for view, _ in self.stores["podgroups"].list():  # preemptibility may have changed for any of them
            self.queue.add(view.key)

    # -- one PodGroup --------------------------------------------------------------------------
    def reconcile(self, key: str) -> bool:
        """Write PodGroup ``key``'s resource status if it changed; False when the write must be retried."""
        found = self.stores["podgroups"].get(key)
        if found is None:
            return True
        pg, current = found
        with self._lock:
            pod_keys = sorted(self._by_group.get(key, ()))
        pods = [p for p in (self.stores["pods"].get(k) for k in pod_keys) if p is not None]
        wanted = self.resources_status(pg, pods)
        patch = {name: change for name in ("requested", "allocated", "allocatedNonPreemptible")
                 if (change := resource_list_patch(current.get(name), wanted[name])) is not None}
        if not patch:
            return True
        try:
            self.kube.patch(object_path(*names.PODGROUPS, pg.namespace, pg.name),
                            {"status": {"resourcesStatus": patch}}, subresource="status")
        except ApiError as exc:
            if exc.status == 404:
                return True
            log.warning("cannot write PodGroup resource status", **fields(podgroup=key, error=str(exc)))
            return False
        return True

    def resources_status(self, pg: views.PodGroupView, pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        requested, allocated = [], []
        for pod in pods:
            try:
                claims = [c for c in (self.stores["resourceclaims"].get(k) for k in pod["claims"])
                          if isinstance(c, ResourceClaim)]
                pod_requested, pod_allocated = pod_resources(pod, self._node_gpu_memory, claims)
            except (QuantityError, GpuRequestError, ApiError) as exc:
                log.error("pod resources unreadable; left out of its PodGroup's status",
                          **fields(pod=pod["key"], podgroup=pg.key, error=str(exc)))
                continue
            requested.append(pod_requested)
            allocated.append(pod_allocated)
        classes = {name: value for name, value, _ in self.stores["priorityclasses"].list()}
        default = next((v for _, v, is_default in self.stores["priorityclasses"].list() if is_default),
                       views.DEFAULT_PRIORITY)
        preemptible = views.is_preemptible(pg, views.job_priority(pg, classes, default))
        total = format_resources(sum_resources(allocated))
        return {"requested": format_resources(sum_resources(requested)), "allocated": total,
                "allocatedNonPreemptible": {} if preemptible else total}

    def _node_gpu_memory(self, node: str) -> int:
        labels = (self.kube.get(object_path("", "v1", "nodes", name=node)).get("metadata") or {}).get("labels") or {}
        return gpu_memory_from_label(labels.get(GPU_MEMORY_LABEL))

    # -- the loop ------------------------------------------------------------------------------
    def informers(self) -> dict[str, Informer]:
        return {
            "priorityclasses": Informer(self.kube, object_path(*names.PRIORITYCLASSES),
                                        transform=views.priority_class_view, on_event=self.on_priority_class,
                                        name="priorityclasses"),
            "podgroups": Informer(self.kube, object_path(*names.PODGROUPS), transform=slim_podgroup,
                                  on_event=self.on_podgroup, name="podgroups"),
            "pods": Informer(self.kube, object_path(*names.PODS), transform=slim_pod, on_event=self.on_pod,
                             name="pods"),
            "resourceclaims": Informer(self.kube, object_path(*names.RESOURCECLAIMS),
                                       transform=dra.resource_claim_view, on_event=self.on_claim,
                                       name="resourceclaims"),
        }

    def handle(self, key: str) -> float | None:
        return None if self.reconcile(key) else RETRY_DELAY
