"""What the binder writes about a BindRequest's outcome: the BindRequest's status, its pod's ``PodBound``
condition, and the deletion of a stale BindRequest -- each aimed at the very object through its UID, so that
it never lands on a new object of the same name made meanwhile."""

from __future__ import annotations

import logging
from typing import Any

from kai.api import names
from kai.api.names import POD_BOUND_CONDITION
from kai.binder.plugins import BindRequest
from kai.kube.client import JSON_PATCH, STRATEGIC_MERGE_PATCH, ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)


def set_status(kube: Kube, request: BindRequest, status: dict[str, Any]) -> bool:
    """Writes the outcome to this very BindRequest: a JSON patch whose first operation tests its UID, so
    that it never lands on a new BindRequest of the same name the scheduler made meanwhile. True if it
    landed."""
    merged = {k: v for k, v in {**(request.raw.get("status") or {}), **status}.items() if v is not None}
    patch: list[dict[str, Any]] = [{"op": "add", "path": "/status", "value": merged}]
    uid = (request.raw.get("metadata") or {}).get("uid")
    if uid:
        patch.insert(0, {"op": "test", "path": "/metadata/uid", "value": uid})
    path = object_path(*names.BINDREQUESTS, request.namespace, request.name, subresource="status")
    try:
        kube.request("PATCH", path, body=patch, content_type=JSON_PATCH)
    except ApiError as exc:
        ids = fields(bind_request=f"{request.namespace}/{request.name}", status=status.get("phase"), error=str(exc))
        if exc.status == 404 or (exc.status == 422 and uid):
            log.info("BindRequest deleted or replaced meanwhile; its status is not recorded", **ids)
        else:
            log.error("could not record BindRequest status", **ids)
        return False
    return True


def set_pod_condition(kube: Kube, request: BindRequest, condition: dict[str, Any]) -> None:
    """The pod's ``PodBound`` condition; a new pod of the same name refuses it (its UID differs)."""
    body: dict[str, Any] = {"status": {"conditions": [condition]}}
    if request.owner_pod_uid:  # the UID is immutable: a new pod of the same name refuses the patch (422)
        body["metadata"] = {"uid": request.owner_pod_uid}
    try:
        kube.request("PATCH", object_path("", "v1", "pods", request.namespace, request.pod_name, "status"),
                     body=body, content_type=STRATEGIC_MERGE_PATCH)
    except ApiError as exc:
        log.warning("could not set pod condition", **fields(pod=f"{request.namespace}/{request.pod_name}",
                                                             condition=POD_BOUND_CONDITION, error=str(exc)))


def delete_stale(kube: Kube, request: BindRequest, why: str) -> bool:
    """Delete ``request``, stale for the reason ``why``; True when it is gone (deleted now or before), False
    when a new BindRequest has its name or the deletion failed."""
    log.info(f"deleting stale BindRequest: {why}", **fields(**ids(request)))
    uid = (request.raw.get("metadata") or {}).get("uid")
    try:  # the UID precondition spares a new BindRequest of the same name made meanwhile
        kube.delete(object_path(*names.BINDREQUESTS, request.namespace, request.name),
                    {"preconditions": {"uid": uid}} if uid else None)
    except ApiError as exc:
        if exc.status == 409:
            return False
        if not exc.status == 404:
            log.error("could not delete stale BindRequest", **fields(
                bind_request=f"{request.namespace}/{request.name}", error=str(exc)))
            return False
    return True


def ids(request: BindRequest) -> dict[str, str]:
    """The log fields naming a BindRequest, its pod and its node."""
    return {"bind_request": f"{request.namespace}/{request.name}", "pod": f"{request.namespace}/{request.pod_name}",
            "node": request.selected_node}
