"""Podgrouper for Knative Serving ``Service``: one gang per Revision (``autoscaling.knative.dev/min-scale``
pods), or one PodGroup per pod when gang scheduling is off or the revision predates it."""

from __future__ import annotations

from kai.sdk import (
    INFERENCE_PRIORITY,
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    GroupingError,
    NotFoundError,
    OwnerReference,
    PodGroupMetadata,
    annotations_of,
    atoi,
    hookimpl,
    labels,
    meta_str,
)

REVISION_LABEL = "serving.knative.dev/revision"
MIN_SCALE_ANNOTATION = "autoscaling.knative.dev/min-scale"


class KnativeGrouper:
    """Groups the pods of a Knative Service by their Revision (label ``serving.knative.dev/revision``)."""

    def __init__(self, gang_schedule: bool):
        self.gang_schedule = gang_schedule

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("serving.knative.dev", "v1", "Service")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        namespace, name = meta_str(pod, "namespace"), meta_str(pod, "name")
        revision_name = labels(pod).get(REVISION_LABEL)
        if revision_name is None:
            raise GroupingError(f"revisionName not found for knative service pod {namespace}/{name}")
        revision = hub.get("serving.knative.dev/v1", "Revision", namespace, revision_name)
        revision["apiVersion"] = revision.get("apiVersion") or "serving.knative.dev/v1"
        revision["kind"] = revision.get("kind") or "Revision"
        if not self.gang_schedule:
            return self._per_pod(hub, revision, pod)
        try:
            per_pod = self._predates_gangs(hub, revision)
        except GroupingError as err:
            raise GroupingError(
                f"unable to determine gang behavior for revision {meta_str(revision, 'namespace')}/"
                f"{revision_name} and pod {namespace}/{name}: {err}"
            ) from err
        return self._per_pod(hub, revision, pod) if per_pod else self._per_revision(hub, revision, pod)

    @staticmethod
    def _common(hub, revision, pod) -> dict:
        return {
            "annotations": hub.annotations(revision, pod),
            "labels": hub.labels(revision, pod),
            "queue": hub.queue(revision, pod),
        }

    def _per_revision(self, hub, revision, pod):
        try:
            min_scale = atoi(annotations_of(revision).get(MIN_SCALE_ANNOTATION, "1"))
        except ValueError:
            min_scale = 1
        return PodGroupMetadata(
            name=f"pg-{meta_str(revision, 'name')}-{meta_str(revision, 'uid')}",
            namespace=meta_str(revision, "namespace"),
            owner=OwnerReference.of(revision),
            min_available=min_scale,
            priority_class=hub.priority_class(revision, pod, INFERENCE_PRIORITY),
            **self._common(hub, revision, pod),
        )

    def _per_pod(self, hub, revision, pod):
        return PodGroupMetadata(
            name=f"pg-{meta_str(pod, 'name')}-{meta_str(pod, 'uid')}",
            namespace=meta_str(pod, "namespace"),
            owner=OwnerReference.of(pod),
            min_available=1,
            priority_class=INFERENCE_PRIORITY,
            **self._common(hub, revision, pod),
        )

    @staticmethod
    def _predates_gangs(hub, revision) -> bool:
        """Whether the revision's existing pods were grouped one PodGroup per pod (before gangs)."""
        namespace = meta_str(revision, "namespace")
        seen: list[str] = []
        for pod in hub.list_pods(namespace, {REVISION_LABEL: meta_str(revision, "name")}):
            group = annotations_of(pod).get(POD_GROUP_ANNOTATION)
            if group is None:
                continue
            if group in seen:
                return False
            seen.append(group)
        if len(seen) > 1:
            return True
        if not seen:
            return False
        try:
            podgroup = hub.get(PODGROUP_API_VERSION, "PodGroup", namespace, seen[0])
        except NotFoundError:
            return False
        except GroupingError as err:
            raise GroupingError(f"failed to get the only podgroup {seen[0]}: {err}") from err
        refs = (podgroup.get("metadata") or {}).get("ownerReferences") or []
        if not refs:
            raise GroupingError(f"podgroup {seen[0]} has no owner references")
        kind = refs[0].get("kind")
        if kind == revision.get("kind"):
            return False
        if kind == "Pod":
            return True
        raise GroupingError(f"podgroup {seen[0]} has unexpected owner reference: {refs[0]}")


def build(arguments):
    return KnativeGrouper(bool(arguments.get("gangSchedule", True)))
