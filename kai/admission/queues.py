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
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kai.admission.responses import allow, deny, kind, refusal
from kai.logs import fields

log = logging.getLogger(__name__)

MISSING_RESOURCES = "resources must be specified"


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
    if read is None or _resources(queue) is None:  # an update leaving resources missing: nothing to compare
        return allow(request)
    warnings: list[str] = []
    if _spec(queue).get("parentQueue"):
        try:
            warnings += _parent_warnings(queue, read)
        except QueueLookupError as exc:
            return deny(request, str(exc))
    if operation == "UPDATE" and _child_names(request.get("oldObject")):
        warnings += _children_warnings(queue, read)
    return allow(request, warnings)


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
