"""Podgroupers for job-like kinds: ``batch/v1`` Job (one PodGroup per Job), CronJob (one PodGroup per
Job run) and ``run.ai/v1`` RunaiJob (pods sharing a name stem share a PodGroup)."""

from __future__ import annotations

from kai.sdk import (
    BATCH_MIN_MEMBER_ANNOTATION,
    PODGROUP_API_VERSION,
    FieldError,
    GroupingError,
    NotFoundError,
    annotations_of,
    hookimpl,
    meta_str,
    nested_int,
    parse_int32,
)


def _exists(hub, namespace: str, name: str) -> bool:
    try:
        hub.get(PODGROUP_API_VERSION, "PodGroup", namespace, name)
    except NotFoundError:
        return False
    return True


def legacy_podgroup_name(hub, top_owner, pod):
    """The PodGroup name of pods grouped by older releases, if such a PodGroup exists, else ``None``.

    Older releases named it after the pod when the job ran pods in parallel, else after the job.
    """
    try:
        parallelism, found = nested_int(top_owner, "spec", "parallelism")
    except FieldError:
        found = False
    base = meta_str(pod, "name") if found and parallelism > 1 else meta_str(top_owner, "name")
    name = f"pg-{base}-{meta_str(top_owner, 'uid')}"
    return name if _exists(hub, meta_str(pod, "namespace"), name) else None


def batch_min_member(top_owner) -> int:
    """The Job's ``kai.scheduler/batch-min-member`` annotation, else 1."""
    override = annotations_of(top_owner).get(BATCH_MIN_MEMBER_ANNOTATION)
    if override is None:
        return 1
    try:
        return parse_int32(override)
    except ValueError as err:
        raise GroupingError(f"invalid min-member annotation value: {err}") from err


class JobGrouper:
    """One gang per Job: PodGroup ``pg-<job>-<job uid>``, minMember 1 or the Job's
    ``kai.scheduler/batch-min-member`` annotation.

    With ``searchForLegacyPodGroups`` (default on) a pod whose per-pod PodGroup ``pg-<pod>-<job uid>``
    of an older release exists stays in it (minMember 1), so an upgrade moves no running pod.
    """

    def __init__(self, search_legacy: bool):
        self.search_legacy = search_legacy

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("batch", "v1", "Job")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        uid = meta_str(top_owner, "uid")
        legacy = f"pg-{meta_str(pod, 'name')}-{uid}"
        if self.search_legacy and legacy != metadata.name and _exists(hub, meta_str(pod, "namespace"), legacy):
            metadata.name = legacy
            return metadata
        metadata.min_available = batch_min_member(top_owner)
        return metadata


class CronJobGrouper:
    """One PodGroup per Job the CronJob started: the default rules applied to the pod's Job."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("batch", "v1", "CronJob")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        job_ref = next((ref for ref in refs if ref.get("kind") == "Job"), None)
        if job_ref is None:
            raise GroupingError("no owner reference of type 'Job'")
        job = hub.get("batch/v1", "Job", meta_str(pod, "namespace"), str(job_ref.get("name") or ""))
        job["apiVersion"], job["kind"] = job.get("apiVersion") or "batch/v1", job.get("kind") or "Job"
        return hub.default_metadata(job, pod)


class RunaiJobGrouper:
    """PodGroup ``pg-<pod name without its last -suffix>-<job uid>``; legacy PodGroups are reused
    when ``searchForLegacyPodGroups`` is on (the default)."""

    def __init__(self, search_legacy: bool):
        self.search_legacy = search_legacy

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("run.ai", "v1", "RunaiJob")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        legacy = legacy_podgroup_name(hub, top_owner, pod) if self.search_legacy else None
        stem, dash, last = meta_str(pod, "name").rpartition("-")
        metadata.name = legacy or f"pg-{stem if dash else last}-{meta_str(top_owner, 'uid')}"
        return metadata


def build_job(arguments):
    return JobGrouper(bool(arguments.get("searchForLegacyPodGroups", True)))


def build_cronjob(arguments):
    return CronJobGrouper()


def build_runaijob(arguments):
    return RunaiJobGrouper(bool(arguments.get("searchForLegacyPodGroups", True)))
