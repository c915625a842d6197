"""GPU reservation pods: one per shared GPU group, holding one ``nvidia.com/gpu`` of its node.

As in KAI, the device plugin gives the reservation pod a physical GPU, and the resource-reservation
program it runs (:mod:`kai.binder.reservationapp`, or KAI's image) writes that device's UUID into
the pod's annotation ``run.ai/reserve_for_gpu_index``; the pods of the group then share that device.
:meth:`Reservations.reserve` finds the group's pod (namespace ``kai-resource-reservation``, label
``runai-gpu-group=<group>``, whatever its name) or creates it, waits for the annotation (40 s by
default; on timeout the pod is deleted and the bind fails), and labels the workload pod with the
group (``runai-gpu-group/<group>=<group>`` for a pod on several devices).

The pod it creates is KAI v0.17's: named by :func:`reservation_pod_name` from the node and the group
alone, ``nodeName`` pinned, label ``app=kai-resource-reservation``, annotation
``karpenter.sh/do-not-disrupt``, and the tolerations of the workload pod that asked for the group,
so it runs on the tainted GPU nodes the workload runs on. Its container asks for one ``nvidia.com/gpu``
and for the other resources of ``pod_resources`` (``requests``/``limits``, a GPU amount there is
dropped), and the pod and its container get the security contexts given, so that it is admitted under
restricted Pod Security and LimitRanges. The name is the same in every binder
process and after a restart, so two binders that both miss the pod in their read collide on one
object: the loser's create is refused with AlreadyExists and it adopts the existing pod instead of
holding a second device. Pods named the old way (``gpu-reservation-<node>-<5 random>``) are still
found by their labels.

Nothing reports a device on nodes without GPUs (kwok, ``fake_gpu_nodes``): there the reservation
pod runs ``sleep infinity`` and, once it is Running without the annotation, the binder writes the
lowest device index of the node that no other reservation pod there holds.

:meth:`Reservations.sync` deletes the reservation pods whose group has no Pending or Running pod.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from kai import __version__
from kai.api import names
from kai.api.names import GPU_GROUP_LABEL, RESERVATION_APP
from kai.binder.plugins import BindError
from kai.common.quantity import parse
from kai.kube.client import ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)

NAMESPACE = "kai-resource-reservation"
APP_LABEL, APP = RESERVATION_APP
DEVICE_ANNOTATION = names.RESERVED_GPU_INDEX
#: The resource-reservation image built from deploy/images/resource-reservation (kai.binder.reservationapp).
IMAGE = f"kai-resource-reservation:{__version__}"
FAKE_IMAGE = "ubuntu"
DEFAULT_TIMEOUT = 40.0
POD_PREFIX = "gpu-reservation"
NUM_DEVICES_ANNOTATION = names.GPU_FRACTION_NUM_DEVICES


def group_label(group: str, multi: bool) -> tuple[str, str]:
    """The label tying a workload pod to ``group`` (one per group for a pod on several devices)."""
    return (f"{GPU_GROUP_LABEL}/{group}", group) if multi else (GPU_GROUP_LABEL, group)


def pod_groups(labels: dict[str, str]) -> list[str]:
    """The GPU groups a pod's labels name."""
    groups = [labels[GPU_GROUP_LABEL]] if GPU_GROUP_LABEL in labels else []
    return groups + [v for k, v in labels.items() if k.startswith(GPU_GROUP_LABEL + "/")]


def free_device(held: Iterable[str], gpus: int) -> str | None:
    """The lowest device index below ``gpus`` not in ``held`` (None when all are held)."""
    taken = set(held)
    return next((str(i) for i in range(gpus) if str(i) not in taken), None)


def has_workload(pods: Iterable[dict[str, Any]], namespace: str) -> bool:
    """Whether a Pending or Running pod outside the reservation namespace is among ``pods``."""
    return any((p.get("metadata") or {}).get("namespace") != namespace
               and (p.get("status") or {}).get("phase", "Pending") in ("Pending", "Running") for p in pods)


def reservation_pod_name(node: str, group: str) -> str:
    """KAI v0.17's name of the reservation pod of ``group`` on ``node``: ``gpu-reservation-`` and the first
    8 bytes of SHA-256 of ``<node>/<group>`` in hex -- a valid DNS label whatever the node and group."""
    digest = hashlib.sha256(f"{node}/{group}".encode()).digest()
    return f"{POD_PREFIX}-{digest[:8].hex()}"


def reservation_pod(node: str, group: str, *, namespace: str = NAMESPACE, app: str = APP, image: str = IMAGE,
                    service_account: str = "", runtime_class: str = "", fake: bool = False,
                    tolerations: list[dict[str, Any]] | None = None, pod_resources: dict[str, Any] | None = None,
                    pod_security_context: dict[str, Any] | None = None,
                    container_security_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reservation pod of ``group`` on ``node``, with (a copy of) the workload's ``tolerations``."""
    resources = {kind: {**{name: str(amount) for name, amount in ((pod_resources or {}).get(kind) or {}).items()
                           if name != names.GPU}, names.GPU: "1"}
                 for kind in ("limits", "requests")}
    container: dict[str, Any] = {
        "name": "resource-reservation", "image": FAKE_IMAGE if fake else image, "imagePullPolicy": "IfNotPresent",
        "resources": resources,
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
    }
    if fake:
        container["args"] = ["sleep", "infinity"]
    if container_security_context:
        container["securityContext"] = copy.deepcopy(container_security_context)
    spec: dict[str, Any] = {"nodeName": node, "containers": [container]}
    if pod_security_context:
        spec["securityContext"] = copy.deepcopy(pod_security_context)
    if tolerations:
        spec["tolerations"] = copy.deepcopy(tolerations)
    if service_account:
        spec["serviceAccountName"] = service_account
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": reservation_pod_name(node, group), "namespace": namespace,
                         "labels": {APP_LABEL: app, GPU_GROUP_LABEL: group},
                         "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": spec}


class _Locks:
    """One lock per name, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(name, (None, 0))
            lock = lock or threading.Lock()
            self._locks[name] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[name]
                if users == 1:
                    del self._locks[name]
                else:
                    self._locks[name] = (lock, users - 1)


class Reservations:
    """The reservation pods of the cluster's shared GPU groups."""

    def __init__(self, kube: Kube, *, namespace: str = NAMESPACE, app: str = APP, image: str = IMAGE,
                 service_account: str = APP, runtime_class: str = "", timeout: float = DEFAULT_TIMEOUT,
                 fake_gpu_nodes: bool = False, pod_resources: dict[str, Any] | None = None,
                 pod_security_context: dict[str, Any] | None = None,
                 container_security_context: dict[str, Any] | None = None, poll: float = 0.2,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.kube = kube
        self.namespace, self.app, self.image = namespace, app, image
        self.service_account, self.runtime_class = service_account, runtime_class
        self.pod_resources, self.pod_security_context = pod_resources, pod_security_context
        self.container_security_context = container_security_context
        self.timeout, self.fake_gpu_nodes, self.poll = timeout, fake_gpu_nodes, poll
        self._clock, self._sleep = clock, sleep
        self._groups, self._nodes = _Locks(), _Locks()

    # -- reserve ---------------------------------------------------------------------------------
    def reserve(self, pod: dict[str, Any], node: dict[str, Any], group: str, multi: bool = False) -> str:
        """The device of ``group`` on ``node`` (its reservation pod made if missing); labels ``pod`` with the group."""
        node_name = node["metadata"]["name"]
        with self._groups.hold(group):
            found = self._reservation_pods({"labelSelector": f"{GPU_GROUP_LABEL}={group}"})
            if found:
                holder = found[0]
                held_on = (holder.get("spec") or {}).get("nodeName")
                if held_on != node_name:
                    raise BindError(f"GPU group {group} is held on node {held_on} by reservation pod "
                                    f"{self.namespace}/{holder['metadata']['name']}, not on {node_name}")
                device = self._wait(holder["metadata"]["name"], node, created=False)
            else:
                holder = self._create(pod, node_name, group)
                device = self._wait(holder["metadata"]["name"], node, created=True)
            key, value = group_label(group, multi)
            meta = pod["metadata"]
            self.kube.patch(object_path("", "v1", "pods", meta["namespace"], meta["name"]),
                            {"metadata": {"labels": {key: value}}})
            return device

    def _create(self, pod: dict[str, Any], node_name: str, group: str) -> dict[str, Any]:
        """Creates the group's reservation pod for ``pod``, or adopts the one of that name another binder made."""
        body = reservation_pod(node_name, group, namespace=self.namespace, app=self.app, image=self.image,
                               service_account=self.service_account, runtime_class=self.runtime_class,
                               fake=self.fake_gpu_nodes, tolerations=(pod.get("spec") or {}).get("tolerations"),
                               pod_resources=self.pod_resources, pod_security_context=self.pod_security_context,
                               container_security_context=self.container_security_context)
        name = body["metadata"]["name"]
        ids = fields(pod=f"{self.namespace}/{name}", node=node_name, gpu_group=group)
        try:
            created = self.kube.post(object_path("", "v1", "pods", self.namespace), body)
        except ApiError as exc:
            if exc.status != 409:
                raise BindError(f"cannot create GPU reservation pod {self.namespace}/{name} "
                                f"on node {node_name}: {exc}") from exc
            return self._adopt(name, node_name, group)
        log.info("GPU reservation pod created", **ids)
        return created

    def _adopt(self, name: str, node_name: str, group: str) -> dict[str, Any]:
        """The existing reservation pod ``name`` (AlreadyExists): made meanwhile by another binder."""
        try:
            existing = self.kube.get(object_path("", "v1", "pods", self.namespace, name))
        except ApiError as exc:
            raise BindError(f"GPU reservation pod {self.namespace}/{name} exists but cannot be read: {exc}") from exc
        meta = existing.get("metadata") or {}
        if (meta.get("labels") or {}).get(GPU_GROUP_LABEL) != group or meta.get("deletionTimestamp"):
            raise BindError(f"GPU reservation pod {self.namespace}/{name} exists but does not hold GPU group "
                            f"{group} (being deleted, or another group's); retrying")
        log.info("GPU reservation pod already exists; reusing it",
                 **fields(pod=f"{self.namespace}/{name}", node=node_name, gpu_group=group))
        return existing

    def _wait(self, name: str, node: dict[str, Any], created: bool) -> str:
        """The device annotation of reservation pod ``name``, waiting up to the timeout."""
        path = object_path("", "v1", "pods", self.namespace, name)
        deadline = self._clock() + self.timeout
        while True:
            try:
                current = self.kube.get(path)
            except ApiError as exc:
                if exc.status == 404:
                    raise BindError(f"GPU reservation pod {self.namespace}/{name} disappeared") from exc
                raise
            device = ((current.get("metadata") or {}).get("annotations") or {}).get(DEVICE_ANNOTATION)
            if device:
                return device
            if self.fake_gpu_nodes and (current.get("status") or {}).get("phase") == "Running":
                return self._assign(current, node)
            if self._clock() >= deadline:
                break
            self._sleep(self.poll)
        if created:
            self._delete(current)
        raise BindError(f"GPU reservation pod {self.namespace}/{name} reported no device "
                        f"(annotation {DEVICE_ANNOTATION}) within {self.timeout:g}s")

    def _assign(self, holder: dict[str, Any], node: dict[str, Any]) -> str:
        """Fake GPU nodes: the binder picks the reservation pod's device and records it on the pod."""
        node_name = node["metadata"]["name"]
        gpus = int(parse(((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", "0")))
        with self._nodes.hold(node_name):
            others = self._reservation_pods({"fieldSelector": f"spec.nodeName={node_name}"})
            held = [((p["metadata"].get("annotations") or {}).get(DEVICE_ANNOTATION) or "") for p in others
                    if p["metadata"]["name"] != holder["metadata"]["name"]]
            device = free_device(held, gpus)
            if device is None:
                raise BindError(f"node {node_name} has no GPU device left for reservation pod "
                                f"{self.namespace}/{holder['metadata']['name']} ({gpus} devices, all held)")
            self.kube.patch(object_path("", "v1", "pods", self.namespace, holder["metadata"]["name"]),
                            {"metadata": {"annotations": {DEVICE_ANNOTATION: device}}})
        log.info("device assigned to GPU reservation pod (fake GPU node)", **fields(
            pod=f"{self.namespace}/{holder['metadata']['name']}", node=node_name, device=device))
        return device

    # -- release and sync ------------------------------------------------------------------------
    def release(self, pod: dict[str, Any], node: str) -> None:
        """After a failed bind: remove ``pod``'s group labels, then delete reservation pods left without pods."""
        meta = pod["metadata"]
        path = object_path("", "v1", "pods", meta["namespace"], meta["name"])
        try:
            labels = (self.kube.get(path).get("metadata") or {}).get("labels") or {}
            drop = {k: None for k in labels if k == GPU_GROUP_LABEL or k.startswith(GPU_GROUP_LABEL + "/")}
            if drop:
                self.kube.patch(path, {"metadata": {"labels": drop}})
        except ApiError as exc:
            if exc.status != 404:  # a deleted pod holds no group
                raise
        self.sync({node})

    def sync(self, nodes: set[str] | None = None) -> int:
        """Delete the reservation pods (on ``nodes``, or all) whose group has no workload pod; returns how many."""
        if nodes is None:
            holders = self._reservation_pods({})
        else:
            holders = [p for n in sorted(nodes)
                       for p in self._reservation_pods({"fieldSelector": f"spec.nodeName={n}"})]
        deleted = 0
        for group in sorted({(h["metadata"].get("labels") or {}).get(GPU_GROUP_LABEL, "") for h in holders} - {""}):
            with self._groups.hold(group):
                pods = [*self._pods({"labelSelector": f"{GPU_GROUP_LABEL}={group}"}),
                        *self._pods({"labelSelector": f"{GPU_GROUP_LABEL}/{group}={group}"})]
                if has_workload(pods, self.namespace):
                    continue
                for holder in pods:
                    if holder["metadata"].get("namespace") == self.namespace:
                        log.info("GPU reservation pod without workload deleted", **fields(
                            pod=f"{self.namespace}/{holder['metadata']['name']}", gpu_group=group))
                        self._delete(holder)
                        deleted += 1
        return deleted

    def sync_node(self, node: str) -> int:
        return self.sync({node})

    # -- API helpers -----------------------------------------------------------------------------
    def _reservation_pods(self, query: dict[str, str]) -> list[dict[str, Any]]:
        selector = f"{APP_LABEL}={self.app}"
        if "labelSelector" in query:
            selector += "," + query["labelSelector"]
        query = {**query, "labelSelector": selector}
        return self.kube.get(object_path("", "v1", "pods", self.namespace), query).get("items") or []

    def _pods(self, query: dict[str, str]) -> list[dict[str, Any]]:
        return self.kube.get("/api/v1/pods", query).get("items") or []

    def _delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.kube.delete(object_path("", "v1", "pods", meta["namespace"], meta["name"]),
                             {"gracePeriodSeconds": 0, "preconditions": {"uid": meta.get("uid")}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
