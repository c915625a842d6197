"""The stalegangeviction action: evict the rest of a gang that has stayed below its minimum too long.

A job is stale when it has a task that holds resources, no task that succeeded, and a pod set with
fewer such tasks than its gang size. A stale job is stamped with the time it became stale; once it
has been stale for its grace period (the job's ``staleness_grace_period``, else the configured one;
negative: never) all
its placed tasks are evicted -- except those bound to a node that is gone, which hold nothing and whose
pods are not evicted by the scheduler. A job that is no longer stale loses its stamp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.api import ACTIVE_ALLOCATED, ACTIVE_USED, Job, Task, TaskStatus

if TYPE_CHECKING:
    from kai.framework.session import Session


def is_stale(job: Job) -> bool:
    holds = False
    for t in job.tasks.values():  # one pass over the tasks: every job is asked, every cycle
        if t.status is TaskStatus.SUCCEEDED:
            return False
        holds = holds or t.status in ACTIVE_USED
    return holds and not job.is_gang_satisfied()


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
    for job in session.jobs.values():
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
    stmt = session.statement()
    for task in job.tasks.values():
        if task.status in ACTIVE_ALLOCATED and task.node in session.node_by_name:
            stmt.evict(task, eviction_message(job, task))
    stmt.commit()
