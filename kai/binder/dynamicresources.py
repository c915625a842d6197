"""The ``dynamicresources`` binder plugin: a pod's ResourceClaims allocated and reserved before its Binding.

For each entry of the BindRequest's ``spec.resourceClaimAllocations`` (KAI's field: the pod's claim entry
name and the allocation the scheduler chose), the claim the entry names (for a template's entry, the
claim named in the pod's ``status.resourceClaimStatuses``) gets, as KAI's binder does:

* the allocation in ``status.allocation`` unless it has one (a claim shared by several pods is allocated
  once), with the finalizer ``resource.kubernetes.io/delete-protection`` first, as kube-scheduler does, so
  kube-controller-manager deallocates it once no pod uses it any more;
* the pod in ``status.reservedFor``.

A BindRequest's ``spec.extendedResourceClaimAllocation`` (KAI's field for DRA-backed extended resources,
KEP-5004) makes the plugin create the pod's implicit claim (``generateName: <pod>-extended-resources-``,
annotation ``resource.kubernetes.io/extended-resource-claim``, the pod as controlling owner, the
finalizer) unless an earlier attempt did, allocate and reserve it as above, and record it in the pod's
``status.extendedResourceClaimStatus`` (claim name and container request mappings) for the kubelet.

Writes use the claim's resourceVersion and are retried on conflict; ``bindTimeoutSeconds`` bounds them.
When the bind fails (in this plugin or a later step), ``rollback`` takes the pod out of ``reservedFor``
and, from a claim it allocated that no other pod has reserved since, the allocation and the finalizer it
added; the pod's implicit claim is deleted and its status entry cleared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kai.api import names
from kai.api.dra import ExtendedClaim
from kai.binder.plugins import (
    DEFAULT_TIMEOUT,
    TIMEOUT_ARGUMENT,
    BindContext,
    BindError,
    InvalidBindRequest,
    bind_timeout,
)
from kai.kube import dra
from kai.kube.client import ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)

NAME = "dynamicresources"
FINALIZER = "resource.kubernetes.io/delete-protection"
#: Attempts of one claim update that meets a conflict (another writer between read and write).
ATTEMPTS = 5


def build(arguments: dict[str, Any]) -> DynamicResources:
    """The plugin; ``bindTimeoutSeconds`` (KAI's argument, default 120) bounds the writes of one bind."""
    unknown = sorted(set(arguments) - {TIMEOUT_ARGUMENT})
    if unknown:
        raise ValueError(f"{NAME}: unknown argument(s) {', '.join(unknown)}; the argument is {TIMEOUT_ARGUMENT}")
    return DynamicResources(bind_timeout(arguments))


def _claim_path(namespace: str, name: str) -> str:
    return object_path(*names.RESOURCECLAIMS, namespace, name)


def _claim_names(pod: dict[str, Any]) -> dict[str, str]:
    """Entry name -> claim name of a pod's ``spec.resourceClaims`` ("" for a template's claim not generated)."""
    return {c.name: c.claim for c in dra.pod_resource_claims(pod.get("spec") or {}, pod.get("status") or {})}


def _is_pod(ref: dict, pod_name: str, uid: str) -> bool:
    return ref.get("resource") == "pods" and not ref.get("apiGroup") and ref.get("name") == pod_name \
        and ref.get("uid") == uid


class DynamicResources:
    name = NAME
    kube: Kube

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout, self._clock = timeout, clock

    def setup(self, kube: Kube) -> None:
        self.kube = kube

    def pre_bind(self, ctx: BindContext) -> None:
        spec = ctx.request.raw.get("spec") or {}
        if not spec.get("resourceClaimAllocations") and not spec.get("extendedResourceClaimAllocation"):
            return
        try:
            allocations = dra.claim_allocations(spec)
            extended = dra.extended_claim(spec, ctx.request.namespace, ctx.request.pod_name)
        except ValueError as exc:
            raise InvalidBindRequest(f"BindRequest {ctx.request.key}: {exc}") from None
        try:
            self._pre_bind(ctx, allocations, extended)
        except (BindError, ApiError):
            self.rollback(ctx)  # the binder rolls back only the plugins whose pre_bind completed
            raise

    def _pre_bind(self, ctx: BindContext, allocations: tuple, extended: ExtendedClaim | None) -> None:
        pod = ctx.pod
        meta = pod.get("metadata") or {}
        pod_name, uid, namespace = meta.get("name", ""), meta.get("uid", ""), ctx.request.namespace
        claim_names = _claim_names(pod)
        done: list[tuple[str, bool, bool]] = ctx.state.setdefault(NAME, [])
        deadline = self._clock() + self.timeout
        for entry, allocation in allocations:
            if self._clock() > deadline:
                raise BindError(f"the resource claims of pod {namespace}/{pod_name} were not reserved within "
                                f"{self.timeout:g}s")
            claim = claim_names.get(entry)
            if claim is None:
                raise InvalidBindRequest(f"BindRequest {ctx.request.key}: pod {namespace}/{pod_name} has no "
                                         f"resource claim entry {entry!r}")
            if not claim:
                raise BindError(f"the claim of entry {entry!r} of pod {namespace}/{pod_name} is not generated yet")
            allocated, finalized = self._reserve(namespace, claim, pod_name, uid, dra.allocation_json(allocation))
            done.append((claim, allocated, finalized))
            log.info("resource claim reserved", **fields(claim=f"{namespace}/{claim}", pod=f"{namespace}/{pod_name}",
                                                         allocated=allocated))
        if extended is not None:
            self._bind_extended(ctx, extended, pod_name, uid)

    def _bind_extended(self, ctx: BindContext, extended: ExtendedClaim, pod_name: str, uid: str) -> None:
        namespace = ctx.request.namespace
        body = dra.extended_claim_json(extended)
        try:
            name = self._find_extended(namespace, uid)
            if name is None:
                created = self.kube.post(object_path(*names.RESOURCECLAIMS, namespace), {
                    "apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
                    "metadata": {"generateName": f"{pod_name}-extended-resources-", "finalizers": [FINALIZER],
                                 "annotations": {dra.EXTENDED_CLAIM_ANNOTATION: "true"},
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid,
                                                      "controller": True, "blockOwnerDeletion": True}]},
                    "spec": {"devices": {"requests": body["deviceRequests"]}}})
                name = created["metadata"]["name"]
        except ApiError as exc:
            raise BindError(f"cannot create the extended resource claim of pod {namespace}/{pod_name}: {exc}") from None
        # the pod's own claim, made now or by an earlier attempt: a failed bind deletes it
        ctx.state[f"{NAME}/extended"] = name
        ctx.state.setdefault(NAME, []).append((name, True, False))
        self._reserve(namespace, name, pod_name, uid, body["allocation"])
        try:
            self.kube.patch(object_path(*names.PODS, namespace, pod_name), {"status": {"extendedResourceClaimStatus": {
                "resourceClaimName": name, "requestMappings": body["containerMappings"]}}}, subresource="status")
        except ApiError as exc:
            raise BindError(f"cannot record claim {namespace}/{name} in the status of pod {namespace}/{pod_name}: "
                            f"{exc}") from None
        log.info("extended resource claim reserved", **fields(claim=f"{namespace}/{name}",
                                                              pod=f"{namespace}/{pod_name}"))

    def _find_extended(self, namespace: str, uid: str) -> str | None:
        """The implicit claim an earlier attempt created for the pod, if any."""
        for claim in self.kube.get(object_path(*names.RESOURCECLAIMS, namespace)).get("items") or ():
            meta = claim.get("metadata") or {}
            if (meta.get("annotations") or {}).get(dra.EXTENDED_CLAIM_ANNOTATION) == "true" and any(
                    o.get("uid") == uid and o.get("controller") for o in meta.get("ownerReferences") or ()):
                return str(meta["name"])
        return None

    def _reserve(self, namespace: str, name: str, pod_name: str, uid: str, allocation: dict) -> tuple[bool, bool]:
        """Allocates (when not yet) and reserves claim ``name`` for the pod; (allocated it, added the finalizer)."""
        path = _claim_path(namespace, name)
        finalized = False
        for _ in range(ATTEMPTS):
            try:
                claim = self.kube.get(path)
                meta, status = claim.setdefault("metadata", {}), claim.setdefault("status", {})
                allocate = not status.get("allocation")
                if allocate and FINALIZER not in (meta.get("finalizers") or ()):
                    meta["finalizers"] = [*(meta.get("finalizers") or ()), FINALIZER]
                    claim = self.kube.request("PUT", path, body=claim)
                    meta, status = claim["metadata"], claim.setdefault("status", {})
                    finalized = True
                reserved = status.get("reservedFor") or []
                if not allocate and any(_is_pod(r, pod_name, uid) for r in reserved):
                    return False, finalized
                if allocate:
                    status["allocation"] = allocation
                status["reservedFor"] = [*reserved, {"resource": "pods", "name": pod_name, "uid": uid}]
                self.kube.request("PUT", f"{path}/status", body=claim)
                return allocate, finalized
            except ApiError as exc:
                if exc.status == 409:
                    continue
                if exc.status == 404:
                    raise BindError(f"resource claim {namespace}/{name} does not exist") from None
                raise BindError(f"cannot reserve resource claim {namespace}/{name}: {exc}") from None
        raise BindError(f"resource claim {namespace}/{name} kept changing; it was not reserved")

    def post_bind(self, ctx: BindContext) -> None:
        return None

    def rollback(self, ctx: BindContext) -> None:
        done = ctx.state.get(NAME) or []
        if not done:
            return
        meta = ctx.pod.get("metadata") or {}
        namespace, created = ctx.request.namespace, ctx.state.get(f"{NAME}/extended")
        for claim, allocated, finalized in reversed(done):
            try:
                self._release(namespace, claim, meta.get("name", ""), meta.get("uid", ""), allocated,
                              finalized or claim == created)
                if claim == created:
                    self.kube.delete(_claim_path(namespace, claim))
                    self.kube.patch(object_path(*names.PODS, namespace, meta.get("name", "")),
                                    {"status": {"extendedResourceClaimStatus": None}}, subresource="status")
            except ApiError as exc:  # the claim keeps the reservation; kube-controller-manager drops it with the pod
                log.warning("cannot take a failed bind's reservation back", **fields(
                    claim=f"{namespace}/{claim}", error=str(exc)))

    def _release(self, namespace: str, name: str, pod_name: str, uid: str, allocated: bool, finalized: bool) -> None:
        path = _claim_path(namespace, name)
        for _ in range(ATTEMPTS):
            try:
                claim = self.kube.get(path)
                status = claim.setdefault("status", {})
                reserved = [r for r in status.get("reservedFor") or [] if not _is_pod(r, pod_name, uid)]
                status["reservedFor"] = reserved
                deallocate = allocated and not reserved
                if deallocate:
                    status.pop("allocation", None)
                claim = self.kube.request("PUT", f"{path}/status", body=claim)
                finalizers = (claim.get("metadata") or {}).get("finalizers") or []
                if deallocate and finalized and FINALIZER in finalizers:
                    claim["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
                    self.kube.request("PUT", path, body=claim)
                return
            except ApiError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
        log.warning("a failed bind's reservation was not taken back: the claim kept changing",
                    **fields(claim=f"{namespace}/{name}"))
