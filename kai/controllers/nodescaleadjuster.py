"""The node scale adjuster: scaling pods that show cluster autoscalers the demand of pending GPU-sharing pods.

A pod asking for a fraction of a GPU (annotation ``gpu-fraction`` or ``gpu-memory``) asks for no
``nvidia.com/gpu`` in its spec, so the cluster autoscaler and Karpenter never see it. As KAI's
``node-scale-adjuster``, this controller keeps, for pods of ``--scheduler-name`` that are pending and
unschedulable (condition ``PodScheduled=False``, reason ``Unschedulable``, set by the scheduler), a
*scaling pod* in namespace ``kai-scale-adjust`` that asks for whole GPUs and copies the pod's node
selector, affinity and tolerations, so that the autoscaler adds a node it fits on:

* named ``<namespace>-<name>`` of the pod it stands for, labelled ``app=scaling-pod``,
  ``shared-gpu-pod-name=<name>`` and ``shared-gpu-pod-namespace=<namespace>``;
* one container ``scaling-pod`` of ``--scaling-pod-image`` running ``kai-scaling-pod`` (which exits
  at once), requesting ``gpu-fraction-num-devices`` (default 1) ``nvidia.com/gpu`` and the sum of
  the pod's containers' CPU and memory requests; restart policy OnFailure, no ``schedulerName``
  (the default scheduler, which autoscalers simulate; this scheduler never places it);
* created with its status set to ``PodScheduled=False``, reason ``Unschedulable``, which is what
  autoscalers look for.

The demand of all such pods is summed: a pod of ``gpu-fraction: 0.5`` counts 0.5 x its devices, one
of ``gpu-memory`` counts ``--gpu-memory-to-fraction-ratio`` (0.1) x its devices, and the total is
rounded up to whole GPUs. A pod gets a scaling pod of its own only while that total exceeds the GPUs
the scaling pods already ask for, or when it needs more devices than the largest of them: two
pending halves make one scaling pod of one GPU.

A scaling pod goes when it has completed, when its pod is gone, or once its pod is no longer
pending as unschedulable (placed, or bound). Each such deletion starts a cool-down of
:data:`COOL_DOWN` seconds in which no scaling pod is created, as the new node settles. One pod that
cannot be read or written is logged and left; the others are handled.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from kai import __version__
from kai.api import names
from kai.common.quantity import QuantityError, format_quantity, parse
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.controller import Controller
from kai.kube.watch import Informer, object_key
from kai.logs import fields

log = logging.getLogger(__name__)

#: KAI's defaults (``cmd/nodescaleadjuster`` flags).
NAMESPACE = "kai-scale-adjust"
APP = "scaling-pod"
SERVICE_ACCOUNT = "scaling-pod"
GPU_MEMORY_TO_FRACTION_RATIO = 0.1
#: The project's image, whose ``kai-scaling-pod`` program exits at once (KAI's scalingpod image).
IMAGE = f"kai-scheduler:{__version__}"
COMMAND = ("kai-scaling-pod",)
CONTAINER = "scaling-pod"
#: Labels tying a scaling pod to the pod it stands for.
POD_NAME_LABEL = "shared-gpu-pod-name"
POD_NAMESPACE_LABEL = "shared-gpu-pod-namespace"
#: Seconds after a scaling pod is deleted during which none is created (KAI's DefaultCoolDownSeconds).
COOL_DOWN = 60.0
#: Retry of a round in which a write failed, seconds.
RETRY_DELAY = 5.0
#: GPU fractions are summed in hundredths, as KAI does.
ROUNDING = 100
#: The one key of the work queue: every round looks at every pod.
ROUND = "adjust"

#: Every API call below (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access("", "pods", ("list", "watch", "create", "delete")),
    Access("", "pods/status", ("patch",)),
)

_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _unschedulable(status: dict[str, Any]) -> bool | None:
    """Whether condition PodScheduled is False with reason Unschedulable; None without that condition."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == names.REASON_UNSCHEDULABLE
    return None


def slim_shared_pod(raw: dict[str, Any], scheduler_name: str) -> dict[str, Any] | None:
    """What the adjuster keeps of a pod of ``scheduler_name`` asking for a GPU fraction; None for other pods."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    if spec.get("schedulerName") != scheduler_name:
        return None
    if not (annotations.get(names.GPU_FRACTION) or annotations.get(names.GPU_MEMORY)):
        return None
    return {
        "key": object_key(raw), "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "node": spec.get("nodeName") or "", "phase": status.get("phase") or "Pending",
        "unschedulable": _unschedulable(status),
        "annotations": {k: annotations[k] for k in (names.GPU_FRACTION, names.GPU_MEMORY,
                                                     names.GPU_FRACTION_NUM_DEVICES) if k in annotations},
        "requests": [(c.get("resources") or {}).get("requests") for c in spec.get("containers") or ()],
        "placement": {k: spec[k] for k in ("nodeSelector", "affinity", "tolerations") if spec.get(k)},
    }


def slim_scaling_pod(raw: dict[str, Any]) -> dict[str, Any]:
    """What the adjuster keeps of a pod in the scaling pods' namespace."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    containers = spec.get("containers") or [{}]
    requests = (containers[0].get("resources") or {}).get("requests") or {}
    return {"name": meta.get("name", ""), "labels": meta.get("labels") or {},
            "phase": (raw.get("status") or {}).get("phase") or "Pending",
            "gpus": requests.get(names.GPU, "0")}


def num_devices(pod: dict[str, Any]) -> int:
    """The pod's ``gpu-fraction-num-devices`` (1 without it); ValueError when unreadable."""
    value = pod["annotations"].get(names.GPU_FRACTION_NUM_DEVICES)
    if value is None:
        return 1
    if not _INTEGER.fullmatch(value):
        raise ValueError(f"{names.GPU_FRACTION_NUM_DEVICES} {value!r} is not a whole number")
    return int(value)


def gpu_fraction(pod: dict[str, Any], memory_ratio: float) -> float:
    """The fraction of a device the pod asks for: ``gpu-fraction``, else ``memory_ratio`` for ``gpu-memory``."""
    fraction = pod["annotations"].get(names.GPU_FRACTION)
    if fraction:
        if not _DECIMAL.fullmatch(fraction):
            raise ValueError(f"{names.GPU_FRACTION} {fraction!r} is not a number")
        return float(fraction)
    memory = pod["annotations"].get(names.GPU_MEMORY, "")
    if not _INTEGER.fullmatch(memory):
        raise ValueError(f"{names.GPU_MEMORY} {memory!r} is not a whole number")
    return memory_ratio


def needed_devices(pods: Iterable[dict[str, Any]], memory_ratio: float) -> tuple[int, list[dict[str, Any]]]:
    """Whole GPUs the pods need together (hundredths summed as KAI does, rounded up), and the pods counted;
    a pod whose annotations cannot be read is logged and left out."""
    total = 0.0
    counted = []
    for pod in pods:
        try:
            fraction, devices = gpu_fraction(pod, memory_ratio), num_devices(pod)
        except ValueError as exc:
            log.warning("cannot read the pod's GPU request; no scaling pod for it",
                        **fields(pod=pod["key"], error=str(exc)))
            continue
        hundredths = int(Decimal(fraction * ROUNDING).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        total += float(hundredths * devices) / ROUNDING
        counted.append(pod)
    return math.ceil(total), counted


def scaling_pod_name(pod: dict[str, Any]) -> str:
    return f"{pod['namespace']}-{pod['name']}"


def scaling_pod(pod: dict[str, Any], devices: int, *, namespace: str = NAMESPACE, image: str = IMAGE,
                app: str = APP, service_account: str = SERVICE_ACCOUNT) -> dict[str, Any]:
    """The scaling pod standing for ``pod``: ``devices`` whole GPUs, the pod's CPU and memory requests and placement."""
    requests: dict[str, str] = {names.GPU: str(devices)}
    present = [r for r in pod["requests"] if r]
    if present:  # KAI adds each container's CPU and memory (zero when it names none) once any has requests
        for resource in ("cpu", "memory"):
            requests[resource] = format_quantity(sum((parse(r.get(resource, 0)) for r in present), Decimal(0)))
    spec: dict[str, Any] = {
        **pod["placement"],
        "restartPolicy": "OnFailure",
        "containers": [{"name": CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent", "command": list(COMMAND),
                        "resources": {"requests": requests, "limits": {names.GPU: str(devices)}}}],
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": scaling_pod_name(pod), "namespace": namespace,
                         "labels": {"app": app, POD_NAME_LABEL: pod["name"], POD_NAMESPACE_LABEL: pod["namespace"]}},
            "spec": spec}


def _gpus(scaling: dict[str, Any]) -> int:
    try:
        return int(parse(scaling["gpus"]))
    except QuantityError:
        return 0


class NodeScaleAdjuster(Controller):
    """Keeps one scaling pod per pending shared-GPU pod the cluster must grow for; ``run(stop)`` blocks until
    ``stop`` is set."""

    name = "node-scale-adjuster"
    key_field = "round"
    wait_for_sync = True  # a scaling pod whose pod is not listed yet must not be taken for one whose pod is gone

    def __init__(self, kube: Kube, *, scheduler_name: str = names.SCHEDULER_NAME, namespace: str = NAMESPACE,
                 image: str = IMAGE, app: str = APP, service_account: str = SERVICE_ACCOUNT,
                 memory_ratio: float = GPU_MEMORY_TO_FRACTION_RATIO, cool_down: float = COOL_DOWN, **kwargs) -> None:
        super().__init__(kube, error_delay=RETRY_DELAY, **kwargs)
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self.image = image
        self.app = app
        self.service_account = service_account
        self.memory_ratio = memory_ratio
        self.cool_down = cool_down
        self._last_deletion: float | None = None
        #: Scaling pods created and not yet in the store, by name; deleted ones the store still shows.
        self._created: dict[str, dict[str, Any]] = {}
        self._deleted: set[str] = set()
        self._lock = threading.Lock()

    def informers(self) -> dict[str, Informer]:
        return {
            "pods": Informer(self.kube, object_path("", "v1", "pods"), on_event=self._changed,
                             transform=lambda raw: slim_shared_pod(raw, self.scheduler_name), name="shared-gpu pods"),
            "scaling": Informer(self.kube, object_path("", "v1", "pods", self.namespace),
                                on_event=self._scaling_changed, transform=slim_scaling_pod, name="scaling pods"),
        }

    def _changed(self, kind: str, obj: Any) -> None:
        self.queue.add(ROUND)

    def _scaling_changed(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._created.pop(obj["name"], None)  # the store has it now, or it is gone
            if kind == "DELETED":
                self._deleted.discard(obj["name"])
        self.queue.add(ROUND)

    def handle(self, key: str) -> float | None:
        return self.adjust()

    # -- one round -----------------------------------------------------------------------------
    def scaling_pods(self) -> list[dict[str, Any]]:
        """The scaling pods: those listed and not deleted since, and those created since that the store does not
        show yet."""
        with self._lock:
            listed = {pod["name"]: pod for pod in self.stores["scaling"].list() if pod["name"] not in self._deleted}
            for name in [n for n in self._created if n in listed]:
                del self._created[name]
            return [*listed.values(), *self._created.values()]

    def adjust(self) -> float | None:
        """Delete the scaling pods no longer needed, then (out of cool-down) create the missing ones; the delay
        before the next round (the rest of the cool-down, or a retry after a failed write), or None."""
        failed = False
        remaining = []
        for scaling in self.scaling_pods():
            if self.still_needed(scaling):
                remaining.append(scaling)
            elif not self._delete(scaling):
                failed = True
                remaining.append(scaling)
        if self._last_deletion is not None:
            left = self.cool_down - (self._clock() - self._last_deletion)
            if left > 0:
                return min(left, RETRY_DELAY) if failed else left
        if not self._create_missing(remaining):
            failed = True
        return RETRY_DELAY if failed else None

    def still_needed(self, scaling: dict[str, Any]) -> bool:
        """KAI's rule: not once completed; not once its pod is gone or no longer pending as unschedulable."""
        if scaling["phase"] == "Succeeded":
            return False
        labels = scaling["labels"]
        if POD_NAME_LABEL not in labels or POD_NAMESPACE_LABEL not in labels:
            return True  # not a scaling pod of this adjuster: left alone, its GPUs counted
        pod = self.stores["pods"].get(f"{labels[POD_NAMESPACE_LABEL]}/{labels[POD_NAME_LABEL]}")
        if pod is None:
            return False
        return pod["unschedulable"] is not False  # no PodScheduled condition yet: still needed

    def unschedulable_pods(self) -> list[dict[str, Any]]:
        """The shared-GPU pods pending unplaced and alive, marked unschedulable, in key order."""
        return sorted((p for p in self.stores["pods"].list()
                       if not p["node"] and p["phase"] not in ("Succeeded", "Failed") and p["unschedulable"]),
                      key=lambda p: p["key"])

    def _create_missing(self, existing: list[dict[str, Any]]) -> bool:
        needed, pods = needed_devices(self.unschedulable_pods(), self.memory_ratio)
        if needed == 0:
            return True
        ok = True
        names_taken = {s["name"] for s in existing}
        for pod in pods:
            if scaling_pod_name(pod) in names_taken:
                continue
            devices = num_devices(pod)
            asked = sum(_gpus(s) for s in existing)
            largest = max((_gpus(s) for s in existing), default=0)
            if needed <= asked and devices <= largest:
                log.debug("no scaling pod: the cluster is scaling up for it already", **fields(pod=pod["key"]))
                continue
            created = self._create(pod, devices)
            if created is None:
                ok = False
                continue
            existing.append(created)
            names_taken.add(created["name"])
        return ok

    # -- writes --------------------------------------------------------------------------------
    def _create(self, pod: dict[str, Any], devices: int) -> dict[str, Any] | None:
        try:
            body = scaling_pod(pod, devices, namespace=self.namespace, image=self.image, app=self.app,
                               service_account=self.service_account)
        except QuantityError as exc:
            log.warning("cannot read the pod's requests; no scaling pod for it",
                        **fields(pod=pod["key"], error=str(exc)))
            return None
        name = body["metadata"]["name"]
        try:
            created = self.kube.post(object_path("", "v1", "pods", self.namespace), body)
        except ApiError as exc:
            log.warning("cannot create a scaling pod", **fields(pod=pod["key"], scaling_pod=name, error=str(exc)))
            return None
        slim = slim_scaling_pod(created)
        with self._lock:
            self._created[name] = slim
        condition = {"type": "PodScheduled", "status": "False", "reason": names.REASON_UNSCHEDULABLE}
        try:
            self.kube.patch(object_path("", "v1", "pods", self.namespace, name),
                            {"status": {"conditions": [condition]}}, subresource="status")
        except ApiError as exc:
            log.warning("cannot mark a scaling pod unschedulable", **fields(scaling_pod=name, error=str(exc)))
        log.info("scaling pod created", **fields(pod=pod["key"], scaling_pod=name, gpus=devices))
        return slim

    def _delete(self, scaling: dict[str, Any]) -> bool:
        name = scaling["name"]
        try:
            self.kube.delete(object_path("", "v1", "pods", self.namespace, name))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot delete a scaling pod", **fields(scaling_pod=name, error=str(exc)))
                return False
        else:
            self._last_deletion = self._clock()
            log.info("scaling pod deleted", **fields(scaling_pod=name, phase=scaling["phase"]))
        with self._lock:
            self._created.pop(name, None)
            if self.stores["scaling"].get(f"{self.namespace}/{name}") is not None:
                self._deleted.add(name)
        return True
