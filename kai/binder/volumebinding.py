"""The ``volumebinding`` binder plugin: kube-scheduler's volume pre-bind, before the pod's Binding.

For each claim of the pod that is not bound yet and whose StorageClass binds on first consumer:

* a static volume of the selected node that matches the claim (:func:`kai.api.storage.static_bindings`)
  gets the claim as its ``spec.claimRef`` (with ``pv.kubernetes.io/bound-by-controller``), which the PV
  controller completes by setting the claim's ``spec.volumeName``;
* otherwise the claim gets ``volume.kubernetes.io/selected-node: <node>`` and its provisioner creates a
  volume reachable from the node (a class without one, ``kubernetes.io/no-provisioner``, fails the bind).

The plugin then waits, up to ``bindTimeoutSeconds`` (KAI's default 120), until every such claim is bound;
a provisioner that gives up removes the annotation, which fails the bind at once. On failure the
``claimRef``s and annotations it wrote are taken back from claims still unbound. A pod is read only when
its namespace has a claim waiting for a volume (a watch of PersistentVolumeClaims tells).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kai.api import names
from kai.api.storage import (
    BOUND_BY_CONTROLLER_ANNOTATION,
    NO_PROVISIONER,
    SELECTED_NODE_ANNOTATION,
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    Storage,
    static_bindings,
)
from kai.binder.plugins import DEFAULT_TIMEOUT, BindContext, BindError, bind_timeout
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.storage import claim_view, pod_claims, volume_view
from kai.kube.watch import Informer
from kai.logs import fields

log = logging.getLogger(__name__)

NAME = "volumebinding"


def build(arguments: dict[str, Any]) -> VolumeBinding:
    return VolumeBinding(bind_timeout(arguments))


def _claim_path(namespace: str, name: str) -> str:
    return object_path(*names.PERSISTENTVOLUMECLAIMS, namespace, name)


class VolumeBinding:
    name = NAME
    kube: Kube

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, poll: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout, self.poll = timeout, poll
        self._sleep, self._clock = sleep, clock
        self.claims: Informer | None = None

    def setup(self, kube: Kube) -> None:
        self.kube = kube
        self.claims = Informer(kube, object_path(*names.PERSISTENTVOLUMECLAIMS), transform=claim_view,
                               name="persistentvolumeclaims")

    def informers(self) -> dict[str, Informer]:
        return {"persistentvolumeclaims": self.claims} if self.claims is not None else {}

    def _namespace_waits(self, namespace: str) -> bool:
        if self.claims is None or not self.claims.synced.is_set():
            return True
        return any(c.namespace == namespace and not c.volume_name for c in self.claims.list())

    def pre_bind(self, ctx: BindContext) -> None:
        request = ctx.request
        if not self._namespace_waits(request.namespace):
            return
        pod = ctx.pod
        refs = pod_claims(pod.get("spec") or {}, request.pod_name, (pod.get("metadata") or {}).get("uid", ""))
        if not refs:
            return
        node = request.selected_node
        claims = [claim_view(self.kube.get(_claim_path(request.namespace, ref.name))) for ref in refs]
        delayed = [c for c in claims if not c.volume_name and self._delayed(c)]
        if not delayed:
            return
        written: dict[str, Any] = ctx.state.setdefault(NAME, {"volumes": [], "claims": []})
        try:
            for claim in delayed:
                if claim.selected_node is not None and claim.selected_node != node:
                    raise BindError(f"persistentvolumeclaim {claim.key} is being provisioned for node "
                                    f"{claim.selected_node}, not {node}")
            self._write(ctx, [c for c in delayed if c.selected_node is None], written)
            self._wait(delayed, set(written["claims"]))
        except (BindError, ApiError):
            self.rollback(ctx)
            raise
        log.info("volumes bound", **fields(pod=f"{request.namespace}/{request.pod_name}", node=node,
                                           claims=",".join(c.name for c in delayed)))

    def _delayed(self, claim: Claim) -> bool:
        if not claim.storage_class:
            return False
        try:
            cls = self.kube.get(object_path(*names.STORAGECLASSES, None, claim.storage_class))
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER

    def _write(self, ctx: BindContext, claims: list[Claim], written: dict[str, Any]) -> None:
        if not claims:
            return
        node = ctx.request.selected_node
        labels = (ctx.node.get("metadata") or {}).get("labels") or {}
        raw = {(v.get("metadata") or {}).get("name", ""): v
               for v in self.kube.get(object_path(*names.PERSISTENTVOLUMES)).get("items") or ()}
        storage = Storage.of(volumes=[volume_view(v) for v in raw.values()])
        chosen, to_provision = static_bindings(claims, node, labels, storage)
        by_key = {c.key: c for c in claims}
        for key, volume in chosen.items():
            claim = by_key[key]
            self.kube.patch(object_path(*names.PERSISTENTVOLUMES, None, volume.name), {
                "metadata": {"resourceVersion": raw[volume.name]["metadata"].get("resourceVersion"),
                             "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"}},
                "spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                      "namespace": claim.namespace, "name": claim.name, "uid": claim.uid,
                                      "resourceVersion": claim.resource_version}}})
            written["volumes"].append((volume.name, claim.namespace, claim.name, claim.uid))
        for claim in to_provision:
            cls = self.kube.get(object_path(*names.STORAGECLASSES, None, claim.storage_class))
            if not cls.get("provisioner") or cls.get("provisioner") == NO_PROVISIONER:
                raise BindError(f"no persistent volume on node {node} for claim {claim.key} and storage class "
                                f"{claim.storage_class} provisions none")
            self.kube.patch(_claim_path(claim.namespace, claim.name), {"metadata": {
                "resourceVersion": claim.resource_version, "annotations": {SELECTED_NODE_ANNOTATION: node}}})
            written["claims"].append((claim.namespace, claim.name))

    def _wait(self, claims: list[Claim], asked: set[tuple[str, str]]) -> None:
        """Until every claim is bound; ``asked`` are the claims this bind annotated for provisioning."""
        deadline = self._clock() + self.timeout
        waiting = list(claims)
        while True:
            still = []
            for claim in waiting:
                now = claim_view(self.kube.get(_claim_path(claim.namespace, claim.name)))
                if now.bound:
                    continue
                if now.selected_node is None and not now.volume_name and (now.namespace, now.name) in asked:
                    raise BindError(f"selectedNode annotation reset for PVC {claim.name!r}")
                still.append(now)
            if not still:
                return
            if self._clock() >= deadline:
                raise BindError(f"binding volumes: timed out waiting {self.timeout:g}s for claims "
                                f"{', '.join(c.key for c in still)} to be bound")
            waiting = still
            self._sleep(self.poll)

    def post_bind(self, ctx: BindContext) -> None:
        pass

    def rollback(self, ctx: BindContext) -> None:
        written = ctx.state.get(NAME)
        if not written:
            return
        for volume, namespace, name, uid in written["volumes"]:
            claim = claim_view(self.kube.get(_claim_path(namespace, name)))
            if claim.volume_name:
                continue
            pv = self.kube.get(object_path(*names.PERSISTENTVOLUMES, None, volume))
            if ((pv.get("spec") or {}).get("claimRef") or {}).get("uid") == uid:
                self.kube.patch(object_path(*names.PERSISTENTVOLUMES, None, volume), {
                    "metadata": {"resourceVersion": pv["metadata"].get("resourceVersion"),
                                 "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: None}},
                    "spec": {"claimRef": None}})
        for namespace, name in written["claims"]:
            claim = claim_view(self.kube.get(_claim_path(namespace, name)))
            if not claim.volume_name and claim.selected_node is not None:
                self.kube.patch(_claim_path(namespace, name),
                                {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: None}}})
        ctx.state.pop(NAME, None)
