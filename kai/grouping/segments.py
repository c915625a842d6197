"""Topology of workload segments (fixed-size slices of a worker group), shared by segmenting podgroupers.

The topology name comes from the pod's ``kai.scheduler/topology`` annotation, else the worker pod
template's, else the workload object's; the levels from the pod's
``kai.scheduler/segment-topology-{required,preferred}-placement`` annotations, else the template's.
"""

from __future__ import annotations

from kai.api.names import SEGMENT_PREFERRED_ANNOTATION, SEGMENT_REQUIRED_ANNOTATION, TOPOLOGY_ANNOTATION
from kai.api.podgroup import TopologyConstraint
from kai.grouping.unstructured import FieldError, nested_str
from kai.grouping.unstructured import annotations as annotations_of  # "annotations": the __future__ feature


def template_annotation(template, key: str) -> str | None:
    """A string annotation of a pod template map (``metadata.annotations``), ``None`` when absent."""
    try:
        value, found = nested_str(template, "metadata", "annotations", key)
    except FieldError:
        return None
    return value if found else None


def worker_annotation(pod, template, key: str) -> str:
    """The pod's non-empty annotation ``key``, else the template's (possibly empty), else ``""``."""
    value = annotations_of(pod).get(key)
    if value:
        return value
    value = template_annotation(template, key)
    return value if value is not None else ""


def segment_topology(pod, template, workload) -> TopologyConstraint | None:
    """The constraint of every segment, or ``None`` without a topology name or without any level."""
    topology = annotations_of(pod).get(TOPOLOGY_ANNOTATION) or template_annotation(template, TOPOLOGY_ANNOTATION)
    if not topology and workload is not None:
        topology = annotations_of(workload).get(TOPOLOGY_ANNOTATION, "")
    if not topology:
        return None
    required = worker_annotation(pod, template, SEGMENT_REQUIRED_ANNOTATION)
    preferred = worker_annotation(pod, template, SEGMENT_PREFERRED_ANNOTATION)
    if not required and not preferred:
        return None
    return TopologyConstraint(topology=topology, required_level=required, preferred_level=preferred)


def trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient
