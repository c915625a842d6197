"""PodGroup metadata: what a podgrouper decides for a pod, before it becomes a PodGroup object.

A podgrouper returns a :class:`PodGroupMetadata`; the grouping hub turns it into a
``scheduling.run.ai/v2alpha2`` PodGroup and the pod's ``pod-group-name`` annotation and
``kai.scheduler/subgroup-name`` label. Errors a podgrouper reports are :class:`GroupingError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

# Priority classes KAI installs, used as per-workload fallbacks.
TRAIN_PRIORITY = "train"
BUILD_PRIORITY = "build"
INFERENCE_PRIORITY = "inference"

DEFAULT_QUEUE = "default-queue"

PREEMPTIBLE = "preemptible"
NON_PREEMPTIBLE = "non-preemptible"
#: Non-preemptible up to the PodGroup's minimum, preemptible above it.
SEMI_PREEMPTIBLE = "semi-preemptible"


class GroupingError(Exception):
    """A pod cannot be grouped; the message is the text KAI reports in its ``PodGrouperWarning`` event."""


class NotFoundError(GroupingError):
    """An object looked up while grouping does not exist (Kubernetes ``NotFound``)."""


class ForbiddenError(GroupingError):
    """The grouper may not read an object (Kubernetes ``Forbidden``)."""


def parse_preemptibility(value: str) -> str:
    """Return ``value`` if it is a valid preemptibility (``preemptible``, ``non-preemptible``,
    ``semi-preemptible`` or ``""``)."""
    if value in (PREEMPTIBLE, NON_PREEMPTIBLE, SEMI_PREEMPTIBLE, ""):
        return value
    raise GroupingError(f"invalid preemptibility value: {value}")


@attrs.define
class TopologyConstraint:
    """A topology-aware placement request: the Topology object's name and the levels to pack into."""

    topology: str = ""
    required_level: str = ""
    preferred_level: str = ""

    def to_dict(self) -> dict[str, str]:
        """The ``topologyConstraint`` map of a PodGroup (empty fields omitted)."""
        fields = {
            "topology": self.topology,
            "requiredTopologyLevel": self.required_level,
            "preferredTopologyLevel": self.preferred_level,
        }
        return {key: value for key, value in fields.items() if value}


@attrs.define
class OwnerReference:
    """The owner reference the PodGroup gets (it is deleted with this object)."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> OwnerReference:
        """The reference to a Kubernetes object given as a map."""
        meta = obj.get("metadata") or {}
        return cls(
            api_version=str(obj.get("apiVersion") or ""),
            kind=str(obj.get("kind") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
        )

    def to_dict(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


@attrs.define
class SubGroupMetadata:
    """One sub-group of a PodGroup: its own gang minimum, an optional parent and topology.

    ``pods`` names the pods known to belong to it (usually only the pod being grouped). A parent
    sub-group sets ``min_subgroup`` (how many of its direct children must be schedulable) instead
    of ``min_available``; the PodGroup then carries ``minSubGroup`` and no ``minMember``.
    """

    name: str
    min_available: int
    parent: str | None = None
    pods: list[str] = attrs.field(factory=list)
    topology: TopologyConstraint | None = None
    min_subgroup: int | None = None


@attrs.define
class PodGroupMetadata:
    """Everything a podgrouper decides about the PodGroup of a pod.

    ``min_subgroup`` (how many direct sub-groups must be schedulable) replaces ``min_available`` in
    the PodGroup when set. ``preemption_delay`` and ``staleness_grace_period`` are seconds.
    """

    name: str
    namespace: str
    owner: OwnerReference
    min_available: int = 1
    queue: str = ""
    priority_class: str = ""
    preemptibility: str = ""
    labels: dict[str, str] = attrs.field(factory=dict)
    annotations: dict[str, str] = attrs.field(factory=dict)
    topology: TopologyConstraint = attrs.field(factory=TopologyConstraint)
    subgroups: list[SubGroupMetadata] = attrs.field(factory=list)
    min_subgroup: int | None = None
    preemption_delay: float | None = None
    staleness_grace_period: float | None = None

    def subgroup_for_pod(self, namespace: str, name: str) -> SubGroupMetadata | None:
        """The first sub-group listing the pod, if the pod is in this PodGroup's namespace."""
        if namespace != self.namespace:
            return None
        for subgroup in self.subgroups:
            if name in subgroup.pods:
                return subgroup
        return None
