"""Podgrouper for ``jobset.x-k8s.io/v1alpha2`` JobSet: one gang per replicated job when jobs start in
order (the default), else one gang for the whole JobSet."""

from __future__ import annotations

from kai import hookimpl
from kai.api.podgroup import GroupingError
from kai.grouping.unstructured import labels, meta_str, nested_int, nested_list, nested_str

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
IN_ORDER = "InOrder"
INT32_MAX = 2**31 - 1


def _int(obj, where, *path):
    try:
        return nested_int(obj, *path)
    except GroupingError as err:
        raise GroupingError(f"failed to read {'.'.join(path)} from {where}: {err}") from err


def replicated_job_pods(job, where) -> int:
    """Pods one replicated job needs at once: replicas x min(parallelism, completions), at least 1."""
    replicas, found = _int(job, where, "replicas")
    replicas = replicas if found and replicas > 0 else 1
    parallelism, found = _int(job, where, "template", "spec", "parallelism")
    parallelism = parallelism if found and parallelism > 0 else 1
    completions, found = _int(job, where, "template", "spec", "completions")
    if found and 0 < completions < parallelism:
        parallelism = completions
    total = replicas * parallelism
    if total > INT32_MAX:
        raise GroupingError(f"minAvailable too large ({total}) for {where}: exceeds int32 max value")
    return max(total, 1)


class JobSetGrouper:
    """PodGroup ``pg-<jobset>-<uid>-<replicated job>`` per replicated job (``InOrder`` start), or
    ``pg-<jobset>-<uid>`` with the sum of all replicated jobs for any other startup order."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("jobset.x-k8s.io", "v1alpha2", "JobSet")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod)
        namespace, name, uid = (meta_str(top_owner, key) for key in ("namespace", "name", "uid"))
        if not name or not uid:
            raise GroupingError(f"jobset top owner {namespace}/{name} missing name or UID")
        job_name = labels(pod).get(REPLICATED_JOB_LABEL)
        if not job_name:
            raise GroupingError(
                f"pod {meta_str(pod, 'namespace')}/{meta_str(pod, 'name')} missing required "
                f'label "{REPLICATED_JOB_LABEL}"'
            )
        where = f"JobSet {namespace}/{name}"
        try:
            order, found = nested_str(top_owner, "spec", "startupPolicy", "startupPolicyOrder")
        except GroupingError as err:
            raise GroupingError(f"failed to read spec.startupPolicy.startupPolicyOrder from {where}: {err}") from err
        try:
            jobs, _ = nested_list(top_owner, "spec", "replicatedJobs")
        except GroupingError as err:
            raise GroupingError(f"failed to read spec.replicatedJobs from {where}: {err}") from err
        jobs = [job for job in jobs or [] if isinstance(job, dict)]
        if not found or order == IN_ORDER:
            metadata.name = f"pg-{name}-{uid}-{job_name}"
            job = next((j for j in jobs if _job_name(j) == job_name), None)
            metadata.min_available = (
                replicated_job_pods(job, f"{where} replicatedJob {job_name}") if job is not None else 1
            )
        else:
            metadata.name = f"pg-{name}-{uid}"
            total = sum(replicated_job_pods(j, f"{where} replicatedJob {_job_name(j)}") for j in jobs if _job_name(j))
            if total > INT32_MAX:
                raise GroupingError(f"total minAvailable too large ({total}) for {where}: exceeds int32 max value")
            metadata.min_available = max(total, 1)
        return metadata


def _job_name(job) -> str:
    try:
        value, found = nested_str(job, "name")
    except GroupingError:
        return ""
    return value if found else ""


def build(args):
    return JobSetGrouper()
