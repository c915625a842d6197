"""Kubernetes Events (core/v1) about pods and other objects, written best-effort."""

from __future__ import annotations

import logging
from typing import Any

from kai.common.times import rfc3339
from kai.kube.client import ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


def record_event(kube: Kube, obj: dict[str, Any], event_type: str, reason: str, message: str,
                 component: str, annotations: dict[str, str] | None = None) -> None:
    """Create an Event about ``obj`` (a decoded object with kind/apiVersion/metadata), with ``annotations`` of its
    own; failures are logged."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    now = rfc3339()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace,
                     **({"annotations": annotations} if annotations else {})},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Pod"), "namespace": namespace,
            "name": meta.get("name"), "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        kube.post(object_path("", "v1", "events", namespace), event)
    except ApiError as exc:
        log.warning("could not record event", **fields(object=f"{namespace}/{meta.get('name')}", reason=reason,
                                                        error=str(exc)))
