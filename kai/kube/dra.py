"""``resource.k8s.io/v1`` objects read into the kernel's DRA model (:mod:`kai.api.dra`), and written back.

The ``*_view`` functions are informer transforms: DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates become the frozen records of :mod:`kai.api.dra`; an object that cannot be read
becomes an :class:`Unreadable` naming the field at fault, which the scheduler reports (log line and
event) and leaves out, so one malformed object never stops a cycle. :func:`pod_resource_claims` reads a
pod's ``spec.resourceClaims`` with the names its generated claims got, and :func:`allocation_json` writes
an allocation in the shape of a claim's ``status.allocation`` (KAI's BindRequest carries it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from kai.api.dra import (
    ALLOCATION_MODES,
    EXACT_COUNT,
    EXTENDED_ENTRY,
    Allocation,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ExtendedClaim,
    PodResourceClaim,
    ResourceClaim,
    ResourceSlice,
)
from kai.api.selectors import LabelRequirement, NodeSelectorTerm
from kai.common.quantity import QuantityError, parse
from kai.kube.storage import node_selector_terms

API_VERSION = "resource.k8s.io/v1"
#: The scheduler's informers of these objects, by resource name.
INFORMERS = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
#: The kinds an :class:`Unreadable` may name (a problem of one of these kinds gets an event on the object).
KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
#: The annotation of a claim generated from a template: the pod's entry it was made for.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: The annotation of the claim holding a pod's DRA-backed extended resources (KEP-5004).
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"

T = TypeVar("T")


@attrs.frozen(slots=True)
class Unreadable:
    """An object the scheduler cannot read: its kind, ``namespace/name`` (or name) and why."""

    kind: str
    key: str
    reason: str

    @property
    def ref(self) -> dict:
        return object_ref(self.kind, self.key)


def object_ref(kind: str, key: str) -> dict:
    """A reference to the DRA object ``kind`` ``namespace/name`` (or ``name``), for events."""
    namespace, _, name = key.rpartition("/")
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta}


class _Bad(ValueError):
    pass


def _key(meta: dict) -> str:
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def _list(value: Any, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"{where}: expected a list")
    return value


def _selectors(value: Any, where: str) -> tuple[str, ...]:
    out = []
    for i, sel in enumerate(_list(value, where)):
        expression = (sel or {}).get("cel", {}).get("expression") if isinstance(sel, dict) else None
        if not isinstance(expression, str) or not expression:
            raise _Bad(f"{where}[{i}]: expected cel.expression")
        out.append(expression)
    return tuple(out)


def _read(kind: str, raw: dict, read: Callable[[dict, dict, dict], T]) -> T | Unreadable:
    meta = raw.get("metadata") or {}
    try:
        return read(meta, raw.get("spec") or {}, raw.get("status") or {})
    except (_Bad, TypeError, AttributeError) as exc:
        return Unreadable(kind, _key(meta), f"{kind} {_key(meta)} cannot be read: {exc}; it is left out")


def device_class_view(raw: dict) -> DeviceClass | Unreadable:
    return _read("DeviceClass", raw, lambda meta, spec, _: DeviceClass(
        str(meta.get("name", "")), _selectors(spec.get("selectors"), "spec.selectors"),
        str(spec.get("extendedResourceName") or "")))


def _attribute(value: Any, where: str) -> object:
    if not isinstance(value, dict) or len(value) != 1:
        raise _Bad(f"{where}: expected exactly one of int, bool, string, version")
    kind, item = next(iter(value.items()))
    if kind == "int" and isinstance(item, int) and not isinstance(item, bool):
        return item
    if kind == "bool" and isinstance(item, bool):
        return item
    if kind in ("string", "version") and isinstance(item, str):
        return item
    raise _Bad(f"{where}: {kind}={item!r} is not a valid attribute value")


def _quantity(value: Any, where: str) -> float:
    try:
        return float(parse(value))
    except (QuantityError, TypeError):
        raise _Bad(f"{where}: {value!r} is not a Kubernetes quantity") from None


def _device(raw: Any, where: str) -> Device:
    if not isinstance(raw, dict) or not raw.get("name"):
        raise _Bad(f"{where}: a device needs a name")
    attributes = {str(k): _attribute(v, f"{where}.attributes[{k}]") for k, v in (raw.get("attributes") or {}).items()}
    capacity = {str(k): _quantity((v or {}).get("value"), f"{where}.capacity[{k}]")
                for k, v in (raw.get("capacity") or {}).items()}
    return Device(str(raw["name"]), attributes, capacity)


def _slice(meta: dict, spec: dict, _status: dict) -> ResourceSlice:
    driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
    if not driver or not pool:
        raise _Bad("spec.driver and spec.pool.name are required")
    devices = tuple(_device(d, f"spec.devices[{i}]") for i, d in enumerate(_list(spec.get("devices"), "spec.devices")))
    if spec.get("perDeviceNodeSelection"):
        raise _Bad("spec.perDeviceNodeSelection is not supported")
    where = [k for k in ("nodeName", "allNodes", "nodeSelector") if spec.get(k)]
    if len(where) != 1:
        raise _Bad("exactly one of spec.nodeName, spec.allNodes, spec.nodeSelector must be set")
    selector = node_selector_terms(spec["nodeSelector"]) if where[0] == "nodeSelector" else None
    return ResourceSlice(str(meta.get("name", "")), str(driver), str(pool), devices,
                         node=str(spec["nodeName"]) if where[0] == "nodeName" else None,
                         all_nodes=where[0] == "allNodes", node_selector=selector)


def resource_slice_view(raw: dict) -> ResourceSlice | Unreadable:
    return _read("ResourceSlice", raw, _slice)


def _request(raw: Any, where: str) -> DeviceRequest:
    if not isinstance(raw, dict) or not raw.get("name"):
        raise _Bad(f"{where}: a request needs a name")
    exactly = raw.get("exactly")
    if not isinstance(exactly, dict):
        what = "firstAvailable" if raw.get("firstAvailable") else "exactly"
        raise _Bad(f"{where}: {what} is {'not supported' if what != 'exactly' else 'required'}")
    device_class = exactly.get("deviceClassName")
    if not device_class:
        raise _Bad(f"{where}.exactly.deviceClassName is required")
    mode = exactly.get("allocationMode") or EXACT_COUNT
    if mode not in ALLOCATION_MODES:
        raise _Bad(f"{where}.exactly.allocationMode {mode!r} is not one of {', '.join(ALLOCATION_MODES)}")
    count = exactly.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise _Bad(f"{where}.exactly.count {count!r} is not a count")
    return DeviceRequest(str(raw["name"]), str(device_class), _selectors(exactly.get("selectors"),
                                                                         f"{where}.exactly.selectors"),
                         mode, count if mode == EXACT_COUNT else 0, bool(exactly.get("adminAccess")))


def _requests(spec: dict) -> tuple[DeviceRequest, ...]:
    devices = spec.get("devices") or {}
    if devices.get("constraints"):
        raise _Bad("spec.devices.constraints are not supported")
    return tuple(_request(r, f"spec.devices.requests[{i}]")
                 for i, r in enumerate(_list(devices.get("requests"), "spec.devices.requests")))


def _node_of(terms: tuple[NodeSelectorTerm, ...] | None) -> str | None:
    """The node an allocation's selector pins (one term: ``metadata.name In [node]``), else None."""
    if terms and len(terms) == 1 and not terms[0].expressions and len(terms[0].fields) == 1:
        field = terms[0].fields[0]
        if field.key == "metadata.name" and field.operator == "In" and len(field.values) == 1:
            return field.values[0]
    return None


def claim_allocations(spec: dict) -> tuple[tuple[str, Allocation], ...]:
    """A BindRequest's ``spec.resourceClaimAllocations`` as (pod entry name, allocation); ValueError when
    one cannot be read."""
    out = []
    for i, entry in enumerate(_list(spec.get("resourceClaimAllocations"), "spec.resourceClaimAllocations")):
        where = f"spec.resourceClaimAllocations[{i}]"
        if not isinstance(entry, dict) or not entry.get("name"):
            raise _Bad(f"{where}: a name is required")
        allocation = _allocation(entry.get("allocation"))
        if allocation is None:
            raise _Bad(f"{where}: the allocation is missing")
        out.append((str(entry["name"]), allocation))
    return tuple(out)


def extended_claim(spec: dict, namespace: str, pod: str) -> ExtendedClaim | None:
    """A BindRequest's ``spec.extendedResourceClaimAllocation`` (KAI's field) for ``namespace/pod``; ValueError
    when it cannot be read."""
    raw = spec.get("extendedResourceClaimAllocation")
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise _Bad("spec.extendedResourceClaimAllocation: expected an object")
    allocation = _allocation(raw.get("allocation"))
    if allocation is None:
        raise _Bad("spec.extendedResourceClaimAllocation: the allocation is missing")
    requests = tuple(_request(r, f"spec.extendedResourceClaimAllocation.deviceRequests[{i}]")
                     for i, r in enumerate(_list(raw.get("deviceRequests"), "deviceRequests")))
    mappings = tuple((str(m.get("containerName", "")), str(m.get("resourceName", "")), str(m.get("requestName", "")))
                     for m in _list(raw.get("containerMappings"), "containerMappings") if isinstance(m, dict))
    claim = ResourceClaim(namespace, f"{EXTENDED_ENTRY}{pod}", requests, extended_for=f"{namespace}/{pod}")
    return ExtendedClaim(claim, allocation, mappings)


def extended_claim_json(extended: ExtendedClaim) -> dict:
    """KAI's BindRequest ``spec.extendedResourceClaimAllocation`` for an implicit claim."""
    return {
        "allocation": allocation_json(extended.allocation),
        "deviceRequests": [{"name": r.name, "exactly": {"deviceClassName": r.device_class, "count": r.count,
                                                        "allocationMode": r.allocation_mode}}
                           for r in extended.claim.requests],
        "containerMappings": [{"containerName": c, "resourceName": res, "requestName": req}
                              for c, res, req in extended.mappings],
    }


def _allocation(raw: Any) -> Allocation | None:
    if not isinstance(raw, dict):
        return None
    devices, admin = [], set()
    for i, result in enumerate(_list((raw.get("devices") or {}).get("results"), "status.allocation.devices.results")):
        if not isinstance(result, dict) or not all(result.get(k) for k in ("request", "driver", "pool", "device")):
            raise _Bad(f"status.allocation.devices.results[{i}]: request, driver, pool and device are required")
        device: DeviceId = (str(result["driver"]), str(result["pool"]), str(result["device"]))
        devices.append((str(result["request"]), device))
        if result.get("adminAccess"):
            admin.add(device)
    terms = node_selector_terms(raw.get("nodeSelector"))
    node = _node_of(terms)
    return Allocation(tuple(devices), node, None if node is not None else terms, frozenset(admin))


def _claim(meta: dict, spec: dict, status: dict) -> ResourceClaim:
    ns = str(meta.get("namespace", ""))
    reserved = tuple(f"{ns}/{r.get('name', '')}" for r in _list(status.get("reservedFor"), "status.reservedFor")
                     if isinstance(r, dict) and r.get("resource") == "pods")
    annotations = meta.get("annotations") or {}
    owner = next((o for o in meta.get("ownerReferences") or () if isinstance(o, dict) and o.get("kind") == "Pod"
                  and o.get("controller")), None)
    extended_for = f"{ns}/{owner.get('name', '')}" if owner is not None and \
        annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true" else ""
    return ResourceClaim(ns, str(meta.get("name", "")), _requests(spec), _allocation(status.get("allocation")),
                         reserved, {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                         from_template=POD_CLAIM_NAME_ANNOTATION in annotations, extended_for=extended_for)


def resource_claim_view(raw: dict) -> ResourceClaim | Unreadable:
    """A claim; its ``reserved_for`` are the ``namespace/name`` of the pods it is reserved for."""
    return _read("ResourceClaim", raw, _claim)


def claim_template_view(raw: dict) -> ResourceClaim | Unreadable:
    """A ResourceClaimTemplate, as the claim it generates (named after the template)."""
    return _read("ResourceClaimTemplate", raw, lambda meta, spec, _: ResourceClaim(
        str(meta.get("namespace", "")), str(meta.get("name", "")), _requests(spec.get("spec") or {})))


def pod_resource_claims(spec: dict, status: dict) -> tuple[PodResourceClaim, ...]:
    """A pod's ``spec.resourceClaims``; a template's entry names the claim generated for it once
    ``status.resourceClaimStatuses`` does ("" before)."""
    entries = spec.get("resourceClaims") or ()
    if not entries:
        return ()
    generated = {str(s.get("name")): str(s.get("resourceClaimName") or "")
                 for s in status.get("resourceClaimStatuses") or () if isinstance(s, dict)}
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("name"):
            continue
        name = str(entry["name"])
        if entry.get("resourceClaimName"):
            out.append(PodResourceClaim(name, str(entry["resourceClaimName"])))
        else:
            template = str(entry.get("resourceClaimTemplateName") or "")
            out.append(PodResourceClaim(name, generated.get(name, ""), template))
    return tuple(out)


def _selector_json(terms: tuple[NodeSelectorTerm, ...]) -> dict:
    def reqs(items: tuple[LabelRequirement, ...]) -> list[dict]:
        return [{"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in items]

    return {"nodeSelectorTerms": [
        {**({"matchExpressions": reqs(t.expressions)} if t.expressions else {}),
         **({"matchFields": reqs(t.fields)} if t.fields else {})} for t in terms]}


def allocation_json(allocation: Allocation) -> dict:
    """A claim's ``status.allocation`` (``resource.k8s.io/v1`` AllocationResult) for ``allocation``."""
    results = []
    for request, (driver, pool, device) in allocation.devices:
        result: dict[str, object] = {"request": request, "driver": driver, "pool": pool, "device": device}
        if (driver, pool, device) in allocation.admin:
            result["adminAccess"] = True
        results.append(result)
    out: dict = {"devices": {"results": results}}
    if allocation.node is not None:
        out["nodeSelector"] = _selector_json(
            (NodeSelectorTerm(fields=(LabelRequirement("metadata.name", "In", (allocation.node,)),)),))
    elif allocation.node_selector is not None:
        out["nodeSelector"] = _selector_json(allocation.node_selector)
    return out

