"""Podgroupers for ``apps/v1`` workloads: Deployment (one PodGroup per pod), StatefulSet and ReplicaSet."""

from __future__ import annotations

from kai.sdk import INFERENCE_PRIORITY, OwnerReference, hookimpl, meta_str


class DeploymentGrouper:
    """Each pod of a Deployment is its own gang: PodGroup ``pg-<pod>-<pod uid>`` owned by the pod.

    Queue, labels and annotations come from the Deployment; the priority class defaults to ``inference``.
    """

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("apps", "v1", "Deployment")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        metadata.owner = OwnerReference.of(pod)
        metadata.priority_class = hub.priority_class(top_owner, pod, INFERENCE_PRIORITY)
        metadata.name = f"pg-{meta_str(pod, 'name')}-{meta_str(pod, 'uid')}"
        return metadata


class OwnerGrouper:
    """One PodGroup per top owner of one kind, with the default rules."""

    def __init__(self, kind):
        self.kind = kind

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [self.kind]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        return hub.default_metadata(top_owner, pod, owners)


def build_deployment(arguments):
    return DeploymentGrouper()


def build_statefulset(arguments):
    return OwnerGrouper(("apps", "v1", "StatefulSet"))


def build_replicaset(arguments):
    return OwnerGrouper(("apps", "v1", "ReplicaSet"))
