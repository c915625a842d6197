"""Podgrouper for Grove (``grove.io/v1alpha1`` PodCliqueSet, formerly PodGangSet): the PodGroup mirrors
the PodGang named by the pod's ``grove.io/podgang`` label, with hierarchical sub-groups."""

from __future__ import annotations

from kai.sdk import (
    PREEMPTIBILITY_LABEL,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    GroupingError,
    PodGroupTopology,
    SubGroupMetadata,
    annotations_of,
    first_duration,
    hookimpl,
    labels,
    meta_str,
    nested_int,
    nested_list,
    nested_str,
    nested_str_list,
    parse_preemptibility,
)

PODGANG_LABEL = "grove.io/podgang"
TOPOLOGY_NAME_ANNOTATION = "grove.io/topology-name"
PODGANG_API_VERSION = "scheduler.grove.io/v1alpha1"


def pack_constraint(obj, topology: str, *path) -> PodGroupTopology | None:
    """The ``required``/``preferred`` levels at ``path`` (only present keys), or ``None`` if neither is set."""
    preferred, has_preferred = nested_str(obj, *path, "preferred")
    required, has_required = nested_str(obj, *path, "required")
    if not has_preferred and not has_required:
        return None
    if not topology:
        raise GroupingError("topology name cannot be empty when topology constraints are defined")
    return PodGroupTopology(topology=topology, required_level=required or "", preferred_level=preferred or "")


def _parent_subgroups(podgang, where, topology):
    """One parent sub-group per topology group config listing pod groups, and child -> parent names."""
    try:
        configs, found = nested_list(podgang, "spec", "topologyConstraintGroupConfigs")
    except GroupingError as err:
        raise GroupingError(f"failed to parse 'topologyConstraintGroupConfigs' field. Err: {err}") from err
    parents: list[SubGroupMetadata] = []
    parent_of: dict[str, str] = {}
    for index, config in enumerate(configs or []):
        if not isinstance(config, dict):
            raise GroupingError(f"invalid structure of spec.topologyConstraintGroupConfigs[{index}] in PodGang {where}")
        try:
            parent = _parent(config, parent_of, topology)
        except GroupingError as err:
            raise GroupingError(f"failed to parse topologyConstraintGroupConfig[{index}]: {err}") from err
        if parent is not None:
            parents.append(parent)
    return parents, parent_of


def _parent(config, parent_of, topology):
    name = _required_str(config, "name")
    try:
        children, found = nested_str_list(config, "podGroupNames")
    except GroupingError as err:
        raise GroupingError(f"failed to parse 'podGroupNames' field. Err: {err}") from err
    if not found or not children:
        return None
    for child in children:
        parent_of[child] = name
    try:
        constraint = pack_constraint(config, topology, "topologyConstraint", "packConstraint")
    except GroupingError as err:
        raise GroupingError(f"failed to parse topology from topologyConstraintGroupConfig {name}. Err: {err}") from err
    return SubGroupMetadata(name, 0, topology=constraint, min_subgroup=len(children))


def _required_str(obj, key):
    try:
        value, found = nested_str(obj, key)
    except GroupingError as err:
        raise GroupingError(f"failed to parse '{key}' field. Err: {err}") from err
    if not found:
        raise GroupingError(f"missing required '{key}' field")
    return value


def _child(spec, index, namespace, podgang_name, topology):
    where = f"{namespace}/{podgang_name}"
    name = _required_str(spec, "name")
    try:
        min_replicas, found = nested_int(spec, "minReplicas")
    except GroupingError as err:
        raise GroupingError(f"failed to parse 'minReplicas' field. Err: {err}") from err
    if not found:
        raise GroupingError("missing required 'minReplicas' field")
    if min_replicas <= 0:
        raise GroupingError("invalid 'minReplicas' field. Must be greater than 0")
    try:
        refs, found = nested_list(spec, "podReferences")
    except GroupingError as err:
        raise GroupingError(f"failed to parse 'podReferences' field. Err: {err}") from err
    if not found:
        raise GroupingError("missing required 'podReferences' field")
    pods = []
    for ref_index, ref in enumerate(refs):
        if not isinstance(ref, dict):
            raise GroupingError(f"invalid spec.podgroup[{index}].podReferences[{ref_index}] in PodGang {where}")
        try:
            ref_namespace, ref_name = _required_str(ref, "namespace"), _required_str(ref, "name")
        except GroupingError as err:
            raise GroupingError(
                f"failed to parse spec.podgroups[{index}].podreferences[{ref_index}] from PodGang {where}. Err: {err}"
            ) from err
        if ref_namespace != namespace:
            raise GroupingError(
                f"cross-namespace pod reference not allowed: pod {ref_namespace}/{ref_name} "
                f"cannot be referenced from PodGang in namespace {namespace}"
            )
        pods.append(ref_name)
    try:
        constraint = pack_constraint(spec, topology, "topologyConstraint", "packConstraint")
    except GroupingError as err:
        raise GroupingError(f"failed to parse topology constraint from PodGang {where}. Err: {err}") from err
    return SubGroupMetadata(name, min_replicas, pods=pods, topology=constraint)


def _child_subgroups(podgang, namespace, podgang_name, parent_of, topology):
    where = f"{namespace}/{podgang_name}"
    try:
        specs, _ = nested_list(podgang, "spec", "podgroups")
    except GroupingError as err:
        raise GroupingError(f"failed to get spec.podgroups from PodGang {where}. Err: {err}") from err
    children, total = [], 0
    for index, spec in enumerate(specs or []):
        if not isinstance(spec, dict):
            raise GroupingError(f"invalid structure of spec.podgroup[{index}] in PodGang {where}")
        try:
            child = _child(spec, index, namespace, podgang_name, topology)
        except GroupingError as err:
            raise GroupingError(f"failed to parse spec.podgroups[{index}] from PodGang {where}. Err: {err}") from err
        child.parent = parent_of.get(child.name)
        children.append(child)
        total += child.min_available
    return children, total


class GroveGrouper:
    """The default rules applied to the PodGang, then Grove's priority, topology and sub-groups."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("grove.io", "v1alpha1", "PodCliqueSet"), ("grove.io", "v1alpha1", "PodGangSet")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        namespace = meta_str(pod, "namespace")
        podgang_name = labels(pod).get(PODGANG_LABEL)
        if podgang_name is None:
            raise GroupingError(
                f"label for podgang name (key: {PODGANG_LABEL}) not found in pod {namespace}/{meta_str(pod, 'name')}"
            )
        where = f"{namespace}/{podgang_name}"
        try:
            podgang = hub.get(PODGANG_API_VERSION, "PodGang", namespace, podgang_name)
        except GroupingError as err:
            raise GroupingError(f"failed to get PodGang {where}. Err: {err}") from err
        podgang["apiVersion"] = podgang.get("apiVersion") or PODGANG_API_VERSION
        podgang["kind"] = podgang.get("kind") or "PodGang"
        metadata = hub.default_metadata(podgang, pod)
        gang_annotations = annotations_of(podgang)
        topology = gang_annotations.get(TOPOLOGY_NAME_ANNOTATION, gang_annotations.get(TOPOLOGY_ANNOTATION, ""))
        try:
            constraint = pack_constraint(podgang, topology, "spec", "topologyConstraint", "packConstraint")
        except GroupingError as err:
            raise GroupingError(
                f"failed to apply topology constraints from PodGang {where}. "
                f"Err: failed to parse topology from PodGang, Err: {err}"
            ) from err
        if constraint is not None:
            metadata.topology = constraint
        try:
            priority, found = nested_str(podgang, "spec", "priorityClassName")
        except GroupingError as err:
            raise GroupingError(
                f"failed to get spec.priorityClassName from PodGang {where}. "
                f"Err: failed to get spec.priorityClassName: {err}"
            ) from err
        if found:
            metadata.priority_class = priority
        if top_owner is not None:
            for key, value in labels(top_owner).items():
                metadata.labels.setdefault(key, value)
            for key, value in annotations_of(top_owner).items():
                metadata.annotations.setdefault(key, value)
        self._apply_merged_metadata(metadata, where)
        parents, parent_of = _parent_subgroups(podgang, where, topology)
        children, total = _child_subgroups(podgang, namespace, podgang_name, parent_of, topology)
        metadata.subgroups = parents + children
        metadata.min_available = total
        return metadata

    @staticmethod
    def _apply_merged_metadata(metadata, where):
        if PRIORITY_CLASS_LABEL in metadata.labels:
            metadata.priority_class = metadata.labels[PRIORITY_CLASS_LABEL]
        merged = {"metadata": {"name": metadata.name, "annotations": metadata.annotations}}
        delay = first_duration([merged], PREEMPTION_DELAY_ANNOTATION, negative=False)
        if delay is not None:
            metadata.preemption_delay = delay
        if PREEMPTIBILITY_LABEL in metadata.labels:
            try:
                metadata.preemptibility = parse_preemptibility(metadata.labels[PREEMPTIBILITY_LABEL])
            except GroupingError as err:
                raise GroupingError(
                    f"failed to get metadata from top owner {where}. Err: failed to parse "
                    f"preemptibility from top owner {metadata.namespace}/{metadata.name}. "
                    f"Err: {err}"
                ) from err
        topology = metadata.topology
        topology.preferred_level = topology.preferred_level or metadata.annotations.get(
            TOPOLOGY_PREFERRED_ANNOTATION, ""
        )
        topology.required_level = topology.required_level or metadata.annotations.get(TOPOLOGY_REQUIRED_ANNOTATION, "")
        topology.topology = topology.topology or metadata.annotations.get(TOPOLOGY_ANNOTATION, "")


def build(arguments):
    return GroveGrouper()
