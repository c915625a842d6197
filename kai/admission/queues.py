"""KAI's Queue webhook (``scheduling.run.ai/v2``, ``POST /validate-scheduling-run-ai-v2-queue``).

A queue without ``spec.resources`` is refused: ``resources must be specified``. With quota validation
(``--enable-quota-validation``, KAI's opt-in) the quotas are compared with the parent's, and a queue that asks
for more is admitted **with warnings**, as KAI does:

* on CREATE and UPDATE of a queue with a parent: its CPU, GPU and memory quota above the parent's, and the
  CPU quotas of the parent's children (``status.childQueues``) together above the parent's;
* on UPDATE of a queue with children: each child's CPU quota above its own, and the children's CPU, GPU and
  memory quotas together above its own.

A parent that cannot be read, or that has no ``spec.resources``, is refused (KAI's messages); a child that
cannot be read is left out of the sums. Quotas are compared as numbers, as KAI compares them (``-1`` too).

This project's GPU quota per resource type (``spec.resourceTypes``) is checked on every CREATE and UPDATE:
a malformed entry, a type given twice, a negative quota, a limit below the quota or two types whose node
selectors one node could match is refused with what is wrong. With quota validation, a queue whose parent
gives resource types may give only those (an unknown type is refused).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from kai.admission.responses import allow, deny, kind, refusal
from kai.api import MAX_RESOURCE_TYPES, selectors_overlap
from kai.logs import fields

log = logging.getLogger(__name__)

MISSING_RESOURCES = "resources must be specified"
#: The fields of an entry of ``spec.resourceTypes``.
RESOURCE_TYPE_FIELDS = frozenset({"name", "nodeSelector", "gpu"})


class QueueLookupError(LookupError):
    """A queue could not be read; the message says why (``queues.scheduling.run.ai "x" not found``)."""


#: Reads a queue by name; raises :class:`QueueLookupError`.
QueueReader = Callable[[str], dict]


def review(request: dict, read: QueueReader | None = None) -> dict:
    """The ``response`` of an AdmissionReview of a Queue; ``read`` given turns quota validation on."""
    operation = request.get("operation")
    queue = request.get("object")
    if kind(request) != "Queue" or operation not in ("CREATE", "UPDATE") or not isinstance(queue, dict):
        return allow(request)
    if refusal(request, _resources_problem) is not None:
        return deny(request, MISSING_RESOURCES, [MISSING_RESOURCES])
    problem = refusal(request, resource_types_problem)
    if problem is not None:
        return deny(request, problem, [problem])
    if read is None or _resources(queue) is None:  # an update leaving resources missing: nothing to compare
        return allow(request)
    warnings: list[str] = []
    if _spec(queue).get("parentQueue"):
        try:
            warnings += _parent_warnings(queue, read)
            problem = _parent_types_problem(queue, read(_spec(queue)["parentQueue"]))
        except QueueLookupError as exc:
            return deny(request, str(exc))
        if problem is not None:
            return deny(request, problem, [problem])
    if operation == "UPDATE" and _child_names(request.get("oldObject")):
        warnings += _children_warnings(queue, read)
    return allow(request, warnings)


def resource_types_problem(queue: object) -> str | None:
    """What is wrong with a queue's ``spec.resourceTypes``, or None: each entry needs a unique name, a node
    selector of label values and a GPU quota (numbers, -1 or at least 0, the limit not below the quota), and no
    node may match two entries' selectors."""
    types = _spec(queue).get("resourceTypes")
    if types is None:
        return None
    if not isinstance(types, list):
        return "spec.resourceTypes must be a list"
    if len(types) > MAX_RESOURCE_TYPES:
        return f"spec.resourceTypes gives {len(types)} types; a cluster may have at most {MAX_RESOURCE_TYPES}"
    seen: dict[str, dict] = {}
    for i, entry in enumerate(types):
        where = f"spec.resourceTypes[{i}]"
        if not isinstance(entry, dict):
            return f"{where} must be an object"
        unknown = sorted(set(entry) - RESOURCE_TYPE_FIELDS)
        if unknown:
            return f"{where}: unknown field {unknown[0]} (a resource type has gpu, name and nodeSelector; " \
                   "only GPUs are divided per type)"
        name, selector = entry.get("name"), entry.get("nodeSelector")
        if not isinstance(name, str) or not name:
            return f"{where}: name must be a non-empty string"
        where = f"spec.resourceTypes[{i}] ({name})"
        if name in seen:
            return f"{where}: resource type {name} is given twice"
        if not isinstance(selector, dict) or not selector or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
            return f"{where}: nodeSelector must map node labels to values, and name at least one"
        problem = _type_quota_problem(entry.get("gpu"), where)
        if problem is not None:
            return problem
        for other, other_selector in seen.items():
            if selectors_overlap(other_selector, selector):
                return f"{where}: its nodeSelector and that of {other} could match the same node; resource types " \
                       "must differ in the value of a label they both name"
        seen[name] = selector
    return None


def _type_quota_problem(gpu: object, where: str) -> str | None:
    if gpu is None:
        return None
    if not isinstance(gpu, dict):
        return f"{where}: gpu must be an object with quota, limit and overQuotaWeight"
    values = {}
    for key in ("quota", "limit", "overQuotaWeight"):
        value = gpu.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{where}: gpu.{key} must be a number"
        if value < 0 and value != -1:
            return f"{where}: gpu.{key} is negative ({value:g}); only -1 (unlimited) may be negative"
        values[key] = value
    quota, limit = values.get("quota", 0), values.get("limit", -1)
    if limit != -1 and quota != -1 and limit < quota:
        return f"{where}: gpu.limit {limit:g} is below gpu.quota {quota:g}"
    return None


def _parent_types_problem(queue: dict, parent: dict) -> str | None:
    """With a parent that gives resource types, the queue may give only those, with the same node selectors (its
    jobs may use only the types every queue above gives)."""
    given = {t.get("name"): t.get("nodeSelector") for t in _spec(parent).get("resourceTypes") or ()
             if isinstance(t, dict)}
    if not given:
        return None
    parent_name = _spec(queue)["parentQueue"]
    for entry in _spec(queue).get("resourceTypes") or ():
        name = entry.get("name") if isinstance(entry, dict) else None
        if not name:
            continue
        if name not in given:
            return f"resource type {name} is unknown to parent queue {parent_name}, which gives " \
                   f"{', '.join(sorted(str(n) for n in given))}"
        if given[name] != entry.get("nodeSelector"):
            return f"resource type {name} has another nodeSelector in parent queue {parent_name}"
    return None


def _resources_problem(queue: object) -> str | None:
    return MISSING_RESOURCES if isinstance(queue, dict) and _resources(queue) is None else None


def _spec(queue: object) -> dict:
    return (queue.get("spec") or {}) if isinstance(queue, dict) else {}


def _resources(queue: dict) -> dict | None:
    return _spec(queue).get("resources")


def _child_names(queue: object) -> list[str]:
    return list((queue.get("status") or {}).get("childQueues") or ()) if isinstance(queue, dict) else []


def _quota(resources: dict | None, resource: str) -> float:
    value = ((resources or {}).get(resource) or {}).get("quota")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _parent_warnings(queue: dict, read: QueueReader) -> list[str]:
    name, parent_name = (queue.get("metadata") or {}).get("name", ""), _spec(queue)["parentQueue"]
    try:
        parent = read(parent_name)
    except QueueLookupError as exc:
        raise QueueLookupError(f"failed to get parent queue {parent_name}: {exc}") from exc
    parent_resources = _resources(parent)
    if parent_resources is None:
        raise QueueLookupError(f"parent queue {parent_name} has no resources defined")
    own = _resources(queue)
    warnings = []
    child_cpu, parent_cpu = _quota(own, "cpu"), _quota(parent_resources, "cpu")
    if child_cpu > parent_cpu:
        warnings.append(f"child queue CPU quota ({child_cpu:.0f}) exceeds parent queue {parent_name} "
                        f"CPU quota ({parent_cpu:.0f})")
    siblings = _read_each(read, [n for n in _child_names(parent) if n != name])
    total_cpu = child_cpu + sum(_quota(_resources(sibling), "cpu") for _, sibling in siblings)
    if total_cpu > parent_cpu:
        warnings.append(f"total children CPU quota ({total_cpu:.0f}) exceeds parent queue {parent_name} "
                        f"CPU quota ({parent_cpu:.0f})")
    child_gpu, parent_gpu = _quota(own, "gpu"), _quota(parent_resources, "gpu")
    if child_gpu > parent_gpu:
        warnings.append(f"child queue GPU quota ({child_gpu:.2f}) exceeds parent queue {parent_name} "
                        f"GPU quota ({parent_gpu:.2f})")
    child_memory, parent_memory = _quota(own, "memory"), _quota(parent_resources, "memory")
    if child_memory > parent_memory:
        warnings.append(f"child queue Memory quota ({child_memory:.0f}) exceeds parent queue {parent_name} "
                        f"Memory quota ({parent_memory:.0f})")
    return warnings


def _children_warnings(queue: dict, read: QueueReader) -> list[str]:
    own = _resources(queue)
    warnings = []
    totals = dict.fromkeys(("cpu", "gpu", "memory"), 0.0)
    cpu = _quota(own, "cpu")
    for child_name, child in _read_each(read, _child_names(queue)):
        resources = _resources(child)
        if resources is None:
            continue
        for resource in totals:
            totals[resource] += _quota(resources, resource)
        if _quota(resources, "cpu") > cpu:
            warnings.append(f"child queue {child_name} CPU quota ({_quota(resources, 'cpu'):.0f}) exceeds "
                            f"parent CPU quota ({cpu:.0f})")
    if totals["cpu"] > cpu:
        warnings.append(f"total children CPU quota ({totals['cpu']:.0f}) exceeds parent CPU quota ({cpu:.0f})")
    if totals["gpu"] > _quota(own, "gpu"):
        warnings.append(f"total children GPU quota ({totals['gpu']:.2f}) exceeds parent GPU quota "
                        f"({_quota(own, 'gpu'):.2f})")
    if totals["memory"] > _quota(own, "memory"):
        warnings.append(f"total children Memory quota ({totals['memory']:.0f}) exceeds parent Memory quota "
                        f"({_quota(own, 'memory'):.0f})")
    return warnings


def _read_each(read: QueueReader, names: list[str]) -> list[tuple[str, dict]]:
    """(name, queue) of the ``names`` that could be read; the others are logged and left out, as in KAI."""
    found = []
    for name in names:
        try:
            found.append((name, read(name)))
        except QueueLookupError as exc:
            log.warning("child queue left out of the quota check", **fields(queue=name, reason=str(exc)))
    return found
