"""The ``dynamicresources`` binder plugin: a pod's ResourceClaims allocated and reserved before its Binding.

For each entry of the BindRequest's ``spec.resourceClaimAllocations`` (KAI's field: the pod's claim entry
name and the allocation the scheduler chose), the claim the entry names (for a template's entry, the
claim named in the pod's ``status.resourceClaimStatuses``) gets, as KAI's binder does:

* the allocation in ``status.allocation`` unless it has one (a claim shared by several pods is allocated
  once), with the finalizer ``resource.kubernetes.io/delete-protection`` first, as kube-scheduler does, so
  kube-controller-manager deallocates it once no pod uses it any more;
* the pod in ``status.reservedFor``.

Writes use the claim's resourceVersion and are retried on conflict; ``bindTimeoutSeconds`` bounds them.
When the bind fails, ``rollback`` takes the pod out of ``reservedFor`` and, from a claim it allocated that
no other pod has reserved since, the allocation and the finalizer it added.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kai.api import names
from kai.binder.plugins import BindContext, BindError, InvalidBindRequest
from kai.kube import dra
from kai.kube.client import ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)

NAME = "dynamicresources"
FINALIZER = "resource.kubernetes.io/delete-protection"
#: Attempts of one claim update that meets a conflict (another writer between read and write).
ATTEMPTS = 5


TIMEOUT_ARGUMENT = "bindTimeoutSeconds"
DEFAULT_TIMEOUT = 120.0


def build(arguments: dict[str, Any]) -> DynamicResources:
    """The plugin; ``bindTimeoutSeconds`` (KAI's argument, default 120) bounds the writes of one bind."""
    unknown = sorted(set(arguments) - {TIMEOUT_ARGUMENT})
    if unknown:
        raise ValueError(f"{NAME}: unknown argument(s) {', '.join(unknown)}; the argument is {TIMEOUT_ARGUMENT}")
    value = arguments.get(TIMEOUT_ARGUMENT, DEFAULT_TIMEOUT)
    try:
        timeout = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{TIMEOUT_ARGUMENT} must be a number of seconds, not {value!r}") from None
    if timeout <= 0:
        raise ValueError(f"{TIMEOUT_ARGUMENT} must be positive, not {value!r}")
    return DynamicResources(timeout)


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
        if not spec.get("resourceClaimAllocations"):
            return
        try:
            allocations = dra.claim_allocations(spec)
        except ValueError as exc:
            raise InvalidBindRequest(f"BindRequest {ctx.request.key}: {exc}") from None
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
        for claim, allocated, finalized in reversed(done):
            try:
                self._release(ctx.request.namespace, claim, meta.get("name", ""), meta.get("uid", ""), allocated,
                              finalized)
            except ApiError as exc:  # the claim keeps the reservation; kube-controller-manager drops it with the pod
                log.warning("cannot take a failed bind's reservation back", **fields(
                    claim=f"{ctx.request.namespace}/{claim}", error=str(exc)))

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
