"""Podgroupers for KubeRay: RayCluster, RayJob and RayService (``ray.io`` v1alpha1 and v1).

The gang is the head plus the minimum of every worker group of the RayCluster; sub-groups are
``headgroup`` and one per worker group, each with the topology of its pod template.
"""

from __future__ import annotations

from kai.sdk import (
    PODGROUP_API_VERSION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    FieldError,
    GroupingError,
    PodGroupTopology,
    SubGroupMetadata,
    hookimpl,
    labels,
    meta_str,
    nested_bool,
    nested_int,
    nested_list,
    nested_map,
    nested_str,
)

GROUP_LABEL = "ray.io/group"
PRIORITY_CLASS_LABEL = "ray.io/priority-class-name"
HEAD_GROUP = "headgroup"
VERSIONS = ("v1alpha1", "v1")


def _template_topology(group_spec, group_name):
    def annotation(key):
        value, found = nested_str(group_spec, "template", "metadata", "annotations", key)
        return value if found else ""

    topology = annotation(TOPOLOGY_ANNOTATION)
    required = annotation(TOPOLOGY_REQUIRED_ANNOTATION)
    preferred = annotation(TOPOLOGY_PREFERRED_ANNOTATION)
    if not required and not preferred:
        return None
    if not topology:
        raise GroupingError(
            f"topology annotation ({TOPOLOGY_ANNOTATION}) is required for {group_name} "
            f"when topology placement annotations are set"
        )
    return PodGroupTopology(topology=topology, required_level=required, preferred_level=preferred)


def _replica_counts(group_spec, index):
    suspended, found = nested_bool(group_spec, "suspended")
    if found and suspended:
        return 0, 0
    replicas, found = nested_int(group_spec, "replicas")
    replicas = replicas if found else 0
    min_replicas, found = nested_int(group_spec, "minReplicas")
    min_replicas = min_replicas if found else 0
    if min_replicas > replicas:
        raise GroupingError(
            "ray-cluster replicas for a workerGroupsSpec can't be less than minReplicas. "
            f"Given {replicas} replicas and {min_replicas} minReplicas. "
            f"Please fix the replicas field for group number {index}"
        )
    return min_replicas, replicas


def cluster_gang(cluster):
    """The RayCluster's minimum and its sub-groups (head first, then counted worker groups)."""
    head, found = nested_map(cluster, "spec", "headGroupSpec")
    subgroups = [SubGroupMetadata(HEAD_GROUP, 1, topology=_template_topology(head, "headGroupSpec") if found else None)]
    total = 1
    groups, found = nested_list(cluster, "spec", "workerGroupSpecs")
    for index, group in enumerate(groups or []):
        if not isinstance(group, dict):
            raise GroupingError(f"failed to parse worker group spec worker-group-{index}")
        min_replicas, replicas = _replica_counts(group, index)
        if min_replicas == 0 and replicas == 0:
            continue
        hosts, found = nested_int(group, "numOfHosts")
        hosts = hosts if found else 1
        group_min = (min_replicas if min_replicas > 0 else replicas) * hosts
        total += group_min
        try:
            name, found = nested_str(group, "groupName")
        except FieldError:
            name, found = "", False
        name = name if found and name else f"worker-group-{index}"
        subgroups.append(
            SubGroupMetadata(name, group_min, topology=_template_topology(group, f"workerGroupSpecs.{name}"))
        )
    return total, subgroups


class RayGrouper:
    """One gang per Ray workload; ``cluster_paths`` locate the RayCluster's name in the top owner's
    status (none: the top owner is the RayCluster)."""

    def __init__(self, kind, cluster_paths=()):
        self.kind = kind
        self.cluster_paths = cluster_paths

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("ray.io", version, self.kind) for version in VERSIONS]

    def _cluster(self, hub, top_owner):
        if not self.cluster_paths:
            return top_owner
        name, found = "", False
        for path in self.cluster_paths:
            name, found = nested_str(top_owner, *path)
            if found:
                break
        if not found or not name:
            raise GroupingError(
                f"failed to extract rayClusterName for {meta_str(top_owner, 'namespace')}/"
                f"{meta_str(top_owner, 'name')} of kind {top_owner.get('kind', '')}. Please make sure that "
                f"the ray-operator is up and a rayCluster child-object has been created"
            )
        return hub.get(str(top_owner.get("apiVersion") or ""), "RayCluster", meta_str(top_owner, "namespace"), name)

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        cluster = self._cluster(hub, top_owner)
        metadata = hub.default_metadata(top_owner, pod)
        metadata.min_available, subgroups = cluster_gang(cluster)
        if self._uses_subgroups(hub, metadata.namespace, metadata.name):
            metadata.subgroups = subgroups
        owner_priority = labels(top_owner).get(PRIORITY_CLASS_LABEL)
        if owner_priority is not None:
            metadata.priority_class = owner_priority
        group = labels(pod).get(GROUP_LABEL)
        for subgroup in metadata.subgroups:
            if subgroup.name == group:
                subgroup.pods.append(meta_str(pod, "name"))
                break
        return metadata

    @staticmethod
    def _uses_subgroups(hub, namespace, name) -> bool:
        """False only for a PodGroup that already exists without sub-groups (created before them)."""
        try:
            existing = hub.get(PODGROUP_API_VERSION, "PodGroup", namespace, name)
        except GroupingError:
            return True
        return bool((existing.get("spec") or {}).get("subGroups"))


def build_raycluster(arguments):
    return RayGrouper("RayCluster")


def build_rayjob(arguments):
    return RayGrouper("RayJob", [("status", "rayClusterName")])


def build_rayservice(arguments):
    return RayGrouper(
        "RayService",
        [("status", "activeServiceStatus", "rayClusterName"), ("status", "pendingServiceStatus", "rayClusterName")],
    )
