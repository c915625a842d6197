"""The podgroup controller: each PodGroup's ``status.resourcesStatus``, summed over its pods as KAI does.

A pod belongs to the PodGroup its annotation ``pod-group-name`` names, in its namespace. Per pod:

* ``requested`` (pods Pending or Running): the containers' requests, plus a shared GPU request
  (``nvidia.com/gpu`` = ``gpu-fraction`` x ``gpu-fraction-num-devices``; ``run.ai/gpu.memory`` =
  ``gpu-memory`` x devices);
* ``allocated`` (pods Running, or Pending with condition PodScheduled=True): the containers'
  requests, plus for a pod that received a fraction (annotation ``received-resource-type:
  Fraction``) its ``gpu-fraction``, or its ``gpu-memory`` over the node's GPU memory (node label
  ``nvidia.com/gpu.memory``, MiB).

``allocatedNonPreemptible`` equals ``allocated`` for a non-preemptible PodGroup (the scheduler's
rule: ``spec.preemptibility``, else priority below 100 is preemptible). The status is written only
when it changed. The queue controller sums these into Queue status.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from decimal import Decimal
from typing import Any

from kai.api.resources import (
    GPU, GPU_FRACTION, GPU_FRACTION_NUM_DEVICES, GPU_MEMORY, GPU_MEMORY_LABEL, GpuRequestError,
    gpu_memory_from_label, parse_gpu_sharing,
)
from kai.scheduler import convert
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.quantity import QuantityError, format_resources, parse, resource_list_patch, sum_resources
from kai.kube.watch import Informer, object_key
from kai.kube.workqueue import WorkQueue, serve
from kai.logs import fields

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "scheduling.run.ai", "v2alpha2", "podgroups"
POD_GROUP_ANNOTATION = "pod-group-name"
RECEIVED_RESOURCE_TYPE = "received-resource-type"
GPU_MEMORY_RESOURCE = "run.ai/gpu.memory"
RETRY_DELAY = 5.0

#: Every API call below (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access("", "pods", ("list", "watch")),
    Access("", "nodes", ("get",)),
    Access(GROUP, PLURAL, ("list", "watch")),
    Access(GROUP, f"{PLURAL}/status", ("patch",)),
    Access("scheduling.k8s.io", "priorityclasses", ("list", "watch")),
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
    }


def slim_podgroup(raw: dict[str, Any]) -> tuple[convert.PodGroupView, dict]:
    """The scheduler's view of a PodGroup (priority, preemptibility) and its current resource status."""
    return convert.podgroup_view(raw), (raw.get("status") or {}).get("resourcesStatus") or {}


def pod_resources(pod: dict[str, Any], node_gpu_memory_mib) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """``(requested, allocated)`` of one slim pod; ``node_gpu_memory_mib(node)`` reads a node's GPU memory.
    Raises QuantityError or GpuRequestError for a pod whose requests cannot be read."""
    base = sum_resources(pod["requests"])
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


class PodGroupController:
    """Keeps PodGroup ``status.resourcesStatus`` current; ``run(stop)`` blocks until ``stop`` is set."""

    name = "podgroup-controller"

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.queue = WorkQueue()
        self._lock = threading.Lock()
        self._informers: dict[str, Informer] = {}
        self._pod_group: dict[str, str] = {}  # pod key -> PodGroup key
        self._by_group: dict[str, set[str]] = defaultdict(set)  # PodGroup key -> pod keys

    def ready(self) -> tuple[bool, str]:
        missing = [name for name, i in self._informers.items() if not i.synced.is_set()]
        if not self._informers or missing:
            return False, f"waiting for the first list of {', '.join(missing) or 'pods, podgroups, priorityclasses'}"
        return True, "synced"

    # -- events --------------------------------------------------------------------------------
    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key, group = pod["key"], pod["group"]
        with self._lock:
            former = self._pod_group.pop(key, "")
            self._by_group[former].discard(key)
            if kind != "DELETED":
                self._pod_group[key] = group
                self._by_group[group].add(key)
        for name in {group, former} - {""}:
            self.queue.add(name)

    def on_podgroup(self, kind: str, pg: tuple[convert.PodGroupView, dict]) -> None:
        if kind != "DELETED":
            self.queue.add(pg[0].key)

    def on_priority_class(self, kind: str, _cls: Any) -> None:
        for view, _ in self._informers["podgroups"].list():  # preemptibility may have changed for any of them
            self.queue.add(view.key)

    # -- one PodGroup --------------------------------------------------------------------------
    def reconcile(self, key: str) -> bool:
        """Write PodGroup ``key``'s resource status if it changed; False when the write must be retried."""
        found = self._informers["podgroups"].get(key)
        if found is None:
            return True
        pg, current = found
        with self._lock:
            pod_keys = sorted(self._by_group.get(key, ()))
        pods = [p for p in (self._informers["pods"].get(k) for k in pod_keys) if p is not None]
        wanted = self.resources_status(pg, pods)
        patch = {name: change for name in ("requested", "allocated", "allocatedNonPreemptible")
                 if (change := resource_list_patch(current.get(name), wanted[name])) is not None}
        if not patch:
            return True
        try:
            self.kube.patch(object_path(GROUP, VERSION, PLURAL, pg.namespace, pg.name),
                            {"status": {"resourcesStatus": patch}}, subresource="status")
        except ApiError as exc:
            if exc.status == 404:
                return True
            log.warning("cannot write PodGroup resource status", **fields(podgroup=key, error=str(exc)))
            return False
        return True

    def resources_status(self, pg: convert.PodGroupView, pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        requested, allocated = [], []
        for pod in pods:
            try:
                pod_requested, pod_allocated = pod_resources(pod, self._node_gpu_memory)
            except (QuantityError, GpuRequestError, ApiError) as exc:
                log.error("pod resources unreadable; left out of its PodGroup's status",
                          **fields(pod=pod["key"], podgroup=pg.key, error=str(exc)))
                continue
            requested.append(pod_requested)
            allocated.append(pod_allocated)
        classes = {name: value for name, value, _ in self._informers["priorityclasses"].list()}
        default = next((v for _, v, is_default in self._informers["priorityclasses"].list() if is_default),
                       convert.DEFAULT_PRIORITY)
        preemptible = convert.is_preemptible(pg, convert.job_priority(pg, classes, default))
        total = format_resources(sum_resources(allocated))
        return {"requested": format_resources(sum_resources(requested)), "allocated": total,
                "allocatedNonPreemptible": {} if preemptible else total}

    def _node_gpu_memory(self, node: str) -> int:
        labels = (self.kube.get(object_path("", "v1", "nodes", name=node)).get("metadata") or {}).get("labels") or {}
        return gpu_memory_from_label(labels.get(GPU_MEMORY_LABEL))

    # -- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self._informers = {
            "priorityclasses": Informer(self.kube, object_path("scheduling.k8s.io", "v1", "priorityclasses"),
                                        transform=convert.priority_class_view, on_event=self.on_priority_class,
                                        name="priorityclasses"),
            "podgroups": Informer(self.kube, object_path(GROUP, VERSION, PLURAL), transform=slim_podgroup,
                                  on_event=self.on_podgroup, name="podgroups"),
            "pods": Informer(self.kube, "/api/v1/pods", transform=slim_pod, on_event=self.on_pod, name="pods"),
        }
        for informer in self._informers.values():
            informer.start()
        worker = threading.Thread(target=self._work, name="podgroup-controller", daemon=True)
        worker.start()
        log.info("podgroup controller started")
        try:
            stop.wait()
        finally:
            self.queue.shut_down()
            for informer in self._informers.values():
                informer.stop()
            worker.join(10)
            log.info("podgroup controller stopped")

    def _work(self) -> None:
        serve(self.queue, self._handle, RETRY_DELAY, log, "podgroup controller failed on a PodGroup", "podgroup")

    def _handle(self, key: str) -> float | None:
        if not all(i.synced.is_set() for i in self._informers.values()):
            return 0.2  # a partial pod list would be written as truth
        return None if self.reconcile(key) else RETRY_DELAY
