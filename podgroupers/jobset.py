"""Podgrouper for ``jobset.x-k8s.io/v1alpha2`` JobSet: one PodGroup per JobSet with a two-level sub-group
tree, a parent per replicated job and a leaf per replica of it (KAI v0.17).

A JobSet whose pods were grouped by an older release (a PodGroup of its name without sub-groups)
keeps the older flat shape until it ends, so that no running pod changes PodGroup.
"""

from __future__ import annotations

from kai.sdk import (
    BATCH_MIN_MEMBER_ANNOTATION,
    PODGROUP_API_VERSION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    GroupingError,
    NotFoundError,
    PodGroupTopology,
    SubGroupMetadata,
    annotations_of,
    hookimpl,
    labels,
    meta_str,
    nested_int,
    nested_list,
    nested_str,
    parse_int32,
)

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
IN_ORDER = "InOrder"
ANY_ORDER = "AnyOrder"


def _pod_label(pod, key: str) -> str:
    value = labels(pod).get(key)
    if not value:
        raise GroupingError(f'pod {meta_str(pod, "namespace")}/{meta_str(pod, "name")} missing required label "{key}"')
    return value


def replicated_jobs(jobset) -> list[dict]:
    """``spec.replicatedJobs`` (each must be a map)."""
    try:
        jobs, _ = nested_list(jobset, "spec", "replicatedJobs")
    except GroupingError as err:
        raise GroupingError(
            f"failed to read spec.replicatedJobs from JobSet {meta_str(jobset, 'namespace')}/"
            f"{meta_str(jobset, 'name')}: {err}"
        ) from err
    for i, job in enumerate(jobs or []):
        if not isinstance(job, dict):
            raise GroupingError(f"replicatedJobs[{i}] is not an object")
    return list(jobs or [])


def startup_order(jobset) -> str:
    """``spec.startupPolicy.startupPolicyOrder``, ``AnyOrder`` when unset."""
    try:
        order, found = nested_str(jobset, "spec", "startupPolicy", "startupPolicyOrder")
    except GroupingError as err:
        raise GroupingError(
            f"failed to read spec.startupPolicy.startupPolicyOrder from JobSet {meta_str(jobset, 'namespace')}/"
            f"{meta_str(jobset, 'name')}: {err}"
        ) from err
    return order if found else ANY_ORDER


def _positive_override(value: str, where: str) -> int:
    try:
        number = parse_int32(value)
    except ValueError as err:
        raise GroupingError(f"invalid {BATCH_MIN_MEMBER_ANNOTATION} annotation on {where}: {err}") from err
    if number < 1:
        raise GroupingError(f"invalid {BATCH_MIN_MEMBER_ANNOTATION} annotation on {where}: value {number} must be >= 1")
    return number


def root_min_subgroup(jobset, count: int) -> int:
    """The annotation ``kai.scheduler/batch-min-member`` (at most ``count``), else 1 for ``InOrder``
    (the JobSet controller starts one replicated job at a time), else every replicated job."""
    override = annotations_of(jobset).get(BATCH_MIN_MEMBER_ANNOTATION)
    if override is not None:
        return min(_positive_override(override, "JobSet"), count)
    return 1 if startup_order(jobset) == IN_ORDER else count


def _int_or_one(job, what: str, *path) -> int:
    try:
        value, found = nested_int(job, *path)
    except GroupingError as err:
        raise GroupingError(f"failed to read {what}: {err}") from err
    return value if found else 1


def _template_annotation(job, key: str) -> str:
    try:
        value, found = nested_str(job, "template", "metadata", "annotations", key)
    except GroupingError as err:
        raise GroupingError(f"failed to read template annotation {key}: {err}") from err
    return value if found else ""


def leaf_min_member(job) -> int:
    """A replica's gang: the template's ``kai.scheduler/batch-min-member``, else ``parallelism`` (default 1)."""
    parallelism = _int_or_one(job, "template.spec.parallelism", "template", "spec", "parallelism")
    override = _template_annotation(job, BATCH_MIN_MEMBER_ANNOTATION)
    return _positive_override(override, "replicatedJob template") if override else parallelism


def leaf_topology(job) -> PodGroupTopology | None:
    """The replica's topology from the template's topology annotations; ``None`` without a name or a level."""
    topology = _template_annotation(job, TOPOLOGY_ANNOTATION)
    required = _template_annotation(job, TOPOLOGY_REQUIRED_ANNOTATION)
    preferred = _template_annotation(job, TOPOLOGY_PREFERRED_ANNOTATION)
    if not topology or not (required or preferred):
        return None
    return PodGroupTopology(topology=topology, required_level=required, preferred_level=preferred)


def subgroup_tree(jobs: list[dict]) -> list[SubGroupMetadata]:
    """Per replicated job a parent (``minSubGroup`` = replicas) followed by its leaves ``<job>-replica-<i>``."""
    subgroups = []
    for i, job in enumerate(jobs):
        try:
            name, found = nested_str(job, "name")
        except GroupingError:
            found = False
        if not found or not name:
            raise GroupingError(f"replicatedJobs[{i}] missing name")
        replicas = _int_or_one(job, "replicatedJob.replicas", "replicas")
        minimum = leaf_min_member(job)
        topology = leaf_topology(job)
        subgroups.append(SubGroupMetadata(name=name, min_available=0, min_subgroup=replicas))
        subgroups.extend(
            SubGroupMetadata(name=f"{name}-replica-{index}", min_available=minimum, parent=name, topology=topology)
            for index in range(replicas)
        )
    return subgroups


def _legacy_names(jobset, jobs: list[dict]) -> list[str]:
    base = f"pg-{meta_str(jobset, 'name')}-{meta_str(jobset, 'uid')}"
    names = [base]
    for job in jobs:
        name = job.get("name")
        if isinstance(name, str) and name:
            names.append(f"{base}-{name}")
    return names


def has_legacy_podgroup(hub, jobset, jobs: list[dict]) -> bool:
    """Whether an older release grouped this JobSet: a PodGroup ``pg-<jobset>-<uid>`` or
    ``pg-<jobset>-<uid>-<replicated job>`` without sub-groups exists."""
    namespace = meta_str(jobset, "namespace")
    for name in _legacy_names(jobset, jobs):
        try:
            podgroup = hub.get(PODGROUP_API_VERSION, "PodGroup", namespace, name)
        except NotFoundError:
            continue
        if not (podgroup.get("spec") or {}).get("subGroups"):
            return True
    return False


def legacy_metadata(metadata, jobset, pod):
    """The older flat shape: ``pg-<jobset>-<uid>-<replicated job>`` for ``InOrder``, else ``pg-<jobset>-<uid>``;
    minMember from ``kai.scheduler/batch-min-member``, else 1."""
    job_name = _pod_label(pod, REPLICATED_JOB_LABEL)
    if startup_order(jobset) == IN_ORDER:
        metadata.name = f"{metadata.name}-{job_name}"
    override = annotations_of(jobset).get(BATCH_MIN_MEMBER_ANNOTATION)
    try:
        metadata.min_available = parse_int32(override) if override is not None else 1
    except ValueError as err:
        raise GroupingError(f"invalid {BATCH_MIN_MEMBER_ANNOTATION} annotation value: {err}") from err
    return metadata


class JobSetGrouper:
    """PodGroup ``pg-<jobset>-<uid>``: ``minSubGroup`` replicated jobs (see :func:`root_min_subgroup`), each a
    parent whose replicas (leaves of ``parallelism`` pods) must all be schedulable; the pod joins the leaf of
    its ``replicatedjob-name`` and ``job-index`` labels."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("jobset.x-k8s.io", "v1alpha2", "JobSet")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        namespace, name, uid = (meta_str(top_owner, key) for key in ("namespace", "name", "uid"))
        if not name or not uid:
            raise GroupingError(f"jobset top owner {namespace}/{name} missing name or UID")
        jobs = replicated_jobs(top_owner)
        if not jobs:
            raise GroupingError(f"jobset {namespace}/{name} has no replicatedJobs")
        metadata = hub.default_metadata(top_owner, pod)
        if has_legacy_podgroup(hub, top_owner, jobs):
            return legacy_metadata(metadata, top_owner, pod)
        metadata.min_subgroup = root_min_subgroup(top_owner, len(jobs))
        metadata.min_available = 0
        metadata.subgroups = subgroup_tree(jobs)
        job_name = _pod_label(pod, REPLICATED_JOB_LABEL)
        leaf = f"{job_name}-replica-{_pod_label(pod, JOB_INDEX_LABEL)}"
        for subgroup in metadata.subgroups:
            if subgroup.name == leaf:
                subgroup.pods.append(meta_str(pod, "name"))
                break
        else:
            raise GroupingError(
                f'leaf subgroup "{leaf}" not found for pod {meta_str(pod, "namespace")}/{meta_str(pod, "name")}'
            )
        return metadata


def build(arguments):
    return JobSetGrouper()
