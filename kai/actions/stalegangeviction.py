"""The stalegangeviction action: evict the rest of a gang that has stayed below its minimum too long.

A job is stale when it has a task that holds resources, no task that succeeded, and a pod set with
fewer such tasks than its gang size. A stale job is stamped with the time it became stale; once it
has been stale for its grace period (the job's ``staleness_grace_period``, else the configured one;
negative: never) all
its placed tasks are evicted -- except those bound to a node that is gone, which hold nothing and whose
pods are not evicted by the scheduler -- within what the PodDisruptionBudgets covering them allow (the rest
go in later cycles). A job that is no longer stale loses its stamp.

Only the jobs that can be stale or stamped are looked at: those the session changed (a task moved, a time
set, arrived) and those that were stale or stamped as the snapshot built them (:mod:`kai.framework.asbuilt`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.actions.eviction import evict_job
from kai.api import ACTIVE_USED, Job, Task, TaskStatus
from kai.framework.asbuilt import JobsKey, changed_jobs, flagged_as_built

if TYPE_CHECKING:
    from kai.framework.session import Session

#: The snapshot memo of the jobs stale or stamped as built (:mod:`kai.framework.asbuilt`).
MEMO = JobsKey("stalegangeviction")


def is_stale(job: Job) -> bool:
    """Whether ``job`` holds resources, has no succeeded task and is below its gang size (one pass over its tasks)."""
    active = dict.fromkeys(job.pod_sets, 0)
    holds = False
    for t in job.tasks.values():
        status = t.status
        if status is TaskStatus.SUCCEEDED:
            return False
        if status in ACTIVE_USED:
            holds = True
            if t.pod_set in active:
                active[t.pod_set] += 1
    return holds and not job.tree_satisfied(active)


def _stale_or_stamped(job: Job) -> bool:
    return job.stale_since is not None or is_stale(job)


def eviction_message(job: Job, task: Task) -> str:
    """KAI's message for a pod evicted from a stale gang."""
    who = f"{task.namespace}/{task.name}"
    if list(job.pod_sets) == ["default"]:
        n = job.pod_sets["default"].min_available
        return f"Workload doesn't meet the minimum required number of pods ({n}), evicting remaining pod: {who}"
    ps = job.pod_sets[task.pod_set]
    return (f"Workload doesn't meet the minimum required number of pods ({ps.min_available}) in sub-group "
            f"{ps.name}, evicting remaining pod: {who}")


def stalegangeviction(session: Session) -> None:
    default = session.plugins.config.staleness_grace_period
    touched = changed_jobs(session)
    built = flagged_as_built(session, MEMO, _stale_or_stamped, touched)
    # the others are as built: neither stale nor stamped
    for job in map(session.jobs.__getitem__, session.snapshot.in_order(touched | built)):
        grace = default if job.staleness_grace_period is None else job.staleness_grace_period
        with session.contained("stalegangeviction", job):
            _evict_if_stale(session, job, grace)


def _evict_if_stale(session: Session, job: Job, grace: float) -> None:
    if not is_stale(job):
        if job.stale_since is not None:
            session.journal.job(job)
            job.stale_since = None
        return
    if job.stale_since is None:
        session.journal.job(job)
        job.stale_since = session.now
    if grace < 0 or session.now - job.stale_since < grace:
        return
    evict_job(session, job, eviction_message)
