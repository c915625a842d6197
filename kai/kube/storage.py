"""Slim views of the storage objects the scheduler and the binder read: PersistentVolumeClaims,
PersistentVolumes, StorageClasses, CSIStorageCapacities and CSIDrivers (:mod:`kai.api.storage`).

Like every informer transform these never raise: an unreadable quantity reads as 0 (a claim asking
nothing, a volume holding nothing, a capacity with no room), so the object takes part without
being trusted beyond what it says.
"""

from __future__ import annotations

from typing import Any

from kai.api import LabelRequirement, LabelSelector
from kai.api.selectors import NodeSelectorTerm
from kai.api.storage import (
    BETA_CLASS_ANNOTATION,
    BIND_COMPLETED_ANNOTATION,
    SELECTED_NODE_ANNOTATION,
    Claim,
    PodClaim,
    StorageCapacity,
    StorageClass,
    Volume,
)
from kai.common.quantity import QuantityError, parse


def _bytes(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(parse(value))
    except (QuantityError, TypeError):
        return None


def _requirements(exprs: Any) -> tuple[LabelRequirement, ...]:
    return tuple(LabelRequirement(str(e.get("key", "")), str(e.get("operator", "")),
                                  tuple(str(v) for v in e.get("values") or ()))
                 for e in exprs or () if isinstance(e, dict))


def _selector(sel: Any) -> LabelSelector | None:
    if not isinstance(sel, dict):
        return None
    labels = sel.get("matchLabels") or {}
    return LabelSelector(tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                         _requirements(sel.get("matchExpressions")))


def node_selector_terms(selector: Any) -> tuple[NodeSelectorTerm, ...] | None:
    """A NodeSelector's terms; None when there is no selector."""
    if not isinstance(selector, dict):
        return None
    return tuple(NodeSelectorTerm(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
                 for t in selector.get("nodeSelectorTerms") or () if isinstance(t, dict))


def pod_claims(spec: dict, name: str, uid: str) -> tuple[PodClaim, ...]:
    """The claims of a pod's volumes: ``persistentVolumeClaim`` ones and the ``<pod>-<volume>`` claims of
    ephemeral volumes (which the pod must own)."""
    claims = []
    for volume in spec.get("volumes") or ():
        if "persistentVolumeClaim" in volume:
            claims.append(PodClaim(str((volume["persistentVolumeClaim"] or {}).get("claimName", ""))))
        elif "ephemeral" in volume:
            claims.append(PodClaim(f"{name}-{volume.get('name', '')}", True, uid))
    return tuple(claims)


def claim_view(raw: dict) -> Claim:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    cls = annotations.get(BETA_CLASS_ANNOTATION, spec.get("storageClassName"))
    requests = (spec.get("resources") or {}).get("requests") or {}
    owner = next((o.get("uid", "") for o in meta.get("ownerReferences") or ()
                  if o.get("controller") and o.get("kind") == "Pod"), "")
    return Claim(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        storage_class=str(cls or ""), request=_bytes(requests.get("storage")) or 0.0,
        access_modes=tuple(spec.get("accessModes") or ()), volume_mode=spec.get("volumeMode") or "Filesystem",
        selector=_selector(spec.get("selector")), volume_name=spec.get("volumeName") or "",
        bind_completed=BIND_COMPLETED_ANNOTATION in annotations,
        selected_node=annotations.get(SELECTED_NODE_ANNOTATION), phase=status.get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")), controller_pod=owner,
        resource_version=meta.get("resourceVersion", ""),
    )


def volume_view(raw: dict) -> Volume:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    ref = spec.get("claimRef")
    return Volume(
        name=meta.get("name", ""), storage_class=str(annotations.get(BETA_CLASS_ANNOTATION,
                                                                     spec.get("storageClassName")) or ""),
        capacity=_bytes((spec.get("capacity") or {}).get("storage")) or 0.0,
        access_modes=tuple(spec.get("accessModes") or ()), volume_mode=spec.get("volumeMode") or "Filesystem",
        node_affinity=node_selector_terms((spec.get("nodeAffinity") or {}).get("required")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        claim_ref=((ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", ""))
                   if isinstance(ref, dict) else None),
        phase=status.get("phase") or "Pending", deleting=bool(meta.get("deletionTimestamp")),
    )


def storage_class_view(raw: dict) -> StorageClass:
    topologies = raw.get("allowedTopologies")
    terms = None if not topologies else tuple(
        NodeSelectorTerm(tuple(LabelRequirement(str(e.get("key", "")), "In", tuple(map(str, e.get("values") or ())))
                               for e in t.get("matchLabelExpressions") or ()))
        for t in topologies if isinstance(t, dict))
    return StorageClass((raw.get("metadata") or {}).get("name", ""), str(raw.get("provisioner") or ""),
                        str(raw.get("volumeBindingMode") or "Immediate"), terms)


def storage_capacity_view(raw: dict) -> StorageCapacity:
    return StorageCapacity(str(raw.get("storageClassName") or ""), _selector(raw.get("nodeTopology")),
                           _bytes(raw.get("capacity")), _bytes(raw.get("maximumVolumeSize")))


def csi_driver_view(raw: dict) -> tuple[str, bool]:
    """(name, whether the driver publishes CSIStorageCapacity)."""
    return (raw.get("metadata") or {}).get("name", ""), (raw.get("spec") or {}).get("storageCapacity") is True
