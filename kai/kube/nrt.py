"""NUMA objects of the API: NodeResourceTopology (``topology.node.k8s.io/v1alpha2``) and pod placement records.

:func:`nrt_view` is an informer transform: a node's Topology Manager policy and scope (the
``topologyManagerPolicy`` / ``topologyManagerScope`` attributes, else the deprecated combined
``topologyPolicies`` value) and its ``Node``-type zones. Placement records (the pod annotations
``kai.scheduler/numa-placement-observed`` / ``-predicted`` and a BindRequest's
``spec.predictedNUMAZones``) are JSON lists of ``{zone, amount: {resource: quantity}}``. Amounts
are in the scheduler's units (CPU millicores). Bad content never raises: the view or record carries
why it was left out.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from kai.api import NumaTopology, NumaZone, ZonePlacement
from kai.api.numa import POLICIES, POLICY_NONE, SCOPE_CONTAINER, SCOPE_POD, SCOPES
from kai.common.quantity import QuantityError, parse

#: The deprecated ``topologyPolicies`` values: (policy, scope).
LEGACY_POLICIES = {
    "SingleNUMANodePodLevel": ("single-numa-node", SCOPE_POD),
    "SingleNUMANodeContainerLevel": ("single-numa-node", SCOPE_CONTAINER),
    "RestrictedPodLevel": ("restricted", SCOPE_POD),
    "RestrictedContainerLevel": ("restricted", SCOPE_CONTAINER),
    "Restricted": ("restricted", SCOPE_CONTAINER),
    "BestEffortPodLevel": ("best-effort", SCOPE_POD),
    "BestEffortContainerLevel": ("best-effort", SCOPE_CONTAINER),
    "BestEffort": ("best-effort", SCOPE_CONTAINER),
}


@attrs.frozen(slots=True)
class NrtView:
    """A node's NUMA topology (None when it reports no NUMA-node zone), or why it cannot be read."""

    name: str
    topology: NumaTopology | None
    invalid: str | None = None


def amount(resource: str, value: Any) -> float:
    """A quantity in the scheduler's units (CPU in millicores); raises ValueError naming it."""
    try:
        v = float(parse(str(value)))
    except (QuantityError, ValueError) as exc:
        raise ValueError(f"{resource} quantity {value!r} is not a quantity") from exc
    return v * 1000.0 if resource == "cpu" else v


def quantity(resource: str, value: float) -> str:
    """The quantity text of an amount (the inverse of :func:`amount`)."""
    if resource == "cpu":
        return f"{int(value) // 1000}" if value % 1000 == 0 else f"{int(round(value))}m"
    return f"{int(value)}" if value == int(value) else f"{value:g}"


def nrt_view(raw: dict) -> NrtView:
    meta = raw.get("metadata") or {}
    name = str(meta.get("name") or "")
    try:
        return NrtView(name, _topology(raw))
    except (ValueError, TypeError, AttributeError) as exc:
        return NrtView(name, None, f"NodeResourceTopology {name} cannot be read ({exc}); the node is scheduled "
                                   "without NUMA data")


def _topology(raw: dict) -> NumaTopology | None:
    attributes = {str(a.get("name")): str(a.get("value")) for a in raw.get("attributes") or ()}
    policy = attributes.get("topologyManagerPolicy")
    if policy:
        policy = policy if policy in POLICIES else POLICY_NONE  # an unknown policy: not modeled (KAI)
        scope = attributes.get("topologyManagerScope")
        scope = scope if scope in SCOPES else SCOPE_CONTAINER
    else:
        legacy = raw.get("topologyPolicies") or ()
        policy, scope = LEGACY_POLICIES.get(str(legacy[0]) if legacy else "", (POLICY_NONE, SCOPE_CONTAINER))
    zones = []
    for i, zone in enumerate(raw.get("zones") or ()):
        if zone.get("type") != "Node":
            continue  # the kubelet aligns on NUMA nodes only (not sockets, dies ...)
        zone_id = zone.get("name")
        if not isinstance(zone_id, str) or not zone_id:
            raise ValueError(f"zones[{i}] has no name")
        allocatable, available = {}, {}
        for r in zone.get("resources") or ():
            res = str(r.get("name") or "")
            allocatable[res] = amount(res, r.get("allocatable", 0))
            available[res] = amount(res, r.get("available", 0))
        zones.append(NumaZone(zone_id, allocatable, available))
    if len({z.id for z in zones}) != len(zones):
        raise ValueError("a zone name is listed twice")
    return NumaTopology.of(policy, scope, zones) if zones else None


def placement_record(value: Any, where: str) -> tuple[ZonePlacement, ...]:
    """A placement record from its decoded JSON value; raises ValueError naming ``where``."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where} must be a non-empty list of zone placements")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("zone"), str) or not isinstance(
                item.get("amount") or {}, dict):
            raise ValueError(f"{where}[{i}] must be {{zone: <name>, amount: {{<resource>: <quantity>}}}}")
        amounts = item.get("amount") or {}
        out.append(ZonePlacement(item["zone"], {str(k): amount(str(k), v) for k, v in amounts.items()}))
    return tuple(out)


def placement_annotation(annotations: dict, key: str) -> tuple[tuple[ZonePlacement, ...], str | None]:
    """``(record, why it is ignored)`` of a placement annotation: empty and None when it is absent."""
    raw = annotations.get(key)
    if not raw:
        return (), None
    try:
        return placement_record(json.loads(raw), f"annotation {key}"), None
    except ValueError as exc:  # json.JSONDecodeError included
        return (), f"annotation {key} is ignored: {exc}"


def placement_json(placement: tuple[ZonePlacement, ...]) -> list[dict]:
    """A placement as the API's JSON value (``spec.predictedNUMAZones``, the annotations)."""
    return [{"zone": zp.zone, "amount": {k: quantity(k, v) for k, v in zp.amounts.items()}} for zp in placement]
