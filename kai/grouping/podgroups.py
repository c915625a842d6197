"""The objects KAI writes for a grouped pod: its PodGroup, and the annotation and label on the pod; and
which pods it leaves alone."""

from __future__ import annotations

from kai.api.names import (
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    PREEMPTIBILITY_LABEL,
    SKIP_PODGROUPER_ANNOTATION,
    SUBGROUP_LABEL,
)
from kai.api.podgroup import SEMI_PREEMPTIBLE, GroupingError, PodGroupMetadata
from kai.common.durations import format_duration
from kai.grouping.unstructured import annotations as annotations_of  # "annotations": the __future__ feature
from kai.grouping.unstructured import meta_str


class GroupingSkipped(GroupingError):
    """KAI leaves the pod alone (an owner asks not to be grouped): no PodGroup, no event, no retry."""


def podgroup_object(metadata: PodGroupMetadata) -> dict:
    """The ``scheduling.run.ai/v2alpha2`` PodGroup KAI creates for ``metadata``. A semi-preemptible one carries
    its preemptibility as the label ``kai.scheduler/preemptibility``, which KAI v0.17's CRD leaves free (its
    ``spec.preemptibility`` takes only ``preemptible`` and ``non-preemptible``)."""
    spec: dict = _minimum(metadata.min_subgroup, metadata.min_available)
    spec.update(queue=metadata.queue, priorityClassName=metadata.priority_class)
    labels = dict(metadata.labels)
    if metadata.preemptibility == SEMI_PREEMPTIBLE:
        labels[PREEMPTIBILITY_LABEL] = SEMI_PREEMPTIBLE
    elif metadata.preemptibility:
        spec["preemptibility"] = metadata.preemptibility
    if metadata.preemption_delay is not None:
        spec["preemptionDelay"] = format_duration(metadata.preemption_delay)
    if metadata.staleness_grace_period is not None:
        spec["stalenessGracePeriod"] = format_duration(metadata.staleness_grace_period)
    topology = metadata.topology.to_dict()
    if topology:
        spec["topologyConstraint"] = topology
    if metadata.subgroups:
        spec["subGroups"] = []
        parents = {subgroup.parent for subgroup in metadata.subgroups if subgroup.parent is not None}
        for subgroup in metadata.subgroups:
            entry: dict = {"name": subgroup.name}
            if subgroup.name not in parents:
                entry.update(_minimum(subgroup.min_subgroup, subgroup.min_available))
            elif subgroup.min_subgroup is not None:  # KAI v0.17 refuses minMember on a subgroup with children
                entry["minSubGroup"] = subgroup.min_subgroup
            if subgroup.parent is not None:
                entry["parent"] = subgroup.parent
            if subgroup.topology is not None:
                entry["topologyConstraint"] = subgroup.topology.to_dict()
            spec["subGroups"].append(entry)
    obj_meta: dict = {"name": metadata.name, "namespace": metadata.namespace}
    if labels:
        obj_meta["labels"] = labels
    if metadata.annotations:
        obj_meta["annotations"] = dict(metadata.annotations)
    obj_meta["ownerReferences"] = [metadata.owner.to_dict()]
    return {"apiVersion": PODGROUP_API_VERSION, "kind": "PodGroup", "metadata": obj_meta, "spec": spec}


def _minimum(min_subgroup: int | None, min_available: int) -> dict:
    """``minSubGroup`` when set, else ``minMember`` (KAI's CRD takes one of the two)."""
    return {"minSubGroup": min_subgroup} if min_subgroup is not None else {"minMember": min_available}


def pod_assignment(podgroup: dict, subgroup: str | None) -> dict:
    """The annotation and label KAI sets on a pod of ``podgroup`` (and ``subgroup``):
    ``{"annotations": {...}, "labels": {...}}``."""
    result: dict = {"annotations": {POD_GROUP_ANNOTATION: meta_str(podgroup, "name")}, "labels": {}}
    if subgroup:
        result["labels"][SUBGROUP_LABEL] = subgroup
    return result


def kept_topology(current_spec: dict, spec: dict) -> dict:
    """``spec`` with the existing PodGroup's ``topologyConstraint`` when the podgrouper names no topology
    (KAI v0.17 keeps a constraint set by someone else)."""
    if (spec.get("topologyConstraint") or {}).get("topology"):
        return spec
    kept = {key: value for key, value in spec.items() if key != "topologyConstraint"}
    if current_spec.get("topologyConstraint"):
        kept["topologyConstraint"] = current_spec["topologyConstraint"]
    return kept


def skip_reason(pod: dict) -> str | None:
    """Why KAI leaves the pod alone: it carries ``kai.scheduler/skip-podgrouper: "true"``, or it is a bare pod
    that already names its own PodGroup; else ``None``. (An owner's annotation: see :class:`GroupingSkipped`.)"""
    meta = pod.get("metadata") or {}
    pod_annotations = annotations_of(pod)
    if pod_annotations.get(SKIP_PODGROUPER_ANNOTATION) == "true":
        return f'the pod has {SKIP_PODGROUPER_ANNOTATION}: "true"'
    if POD_GROUP_ANNOTATION in pod_annotations and not meta.get("ownerReferences"):
        return f"the pod has the {POD_GROUP_ANNOTATION} annotation and no owner: its PodGroup is user-managed"
    return None
