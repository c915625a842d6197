"""The runtimelimit action: evict the placed tasks of a job that has run past its declared maximum runtime.

A job that declares a maximum runtime (:attr:`Job.max_runtime <kai.api.Job.max_runtime>`, the PodGroup's
``kai.scheduler/max-runtime``) and has run for that long since its last start has all its placed tasks evicted --
except those bound to a node that is gone -- within what the PodDisruptionBudgets covering them allow (the rest go
in later cycles). Evicted pods are deleted as any eviction's are; a workload whose controller makes them again
(a Job, a JobSet ...) is queued again and, placed again, starts its runtime afresh.

Only the jobs that declare a maximum runtime and have started are looked at: those the session changed and
those that did as the snapshot built them (:mod:`kai.framework.asbuilt`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.actions.eviction import evict_job
from kai.api import Job, Task
from kai.common.durations import format_duration
from kai.framework.asbuilt import JobsKey, changed_jobs, flagged_as_built

if TYPE_CHECKING:
    from kai.framework.session import Session

#: The snapshot memo of the jobs with a runtime end as built.
MEMO = JobsKey("runtimelimit")


def eviction_message(job: Job, task: Task) -> str:
    """The message of a pod evicted because its job ran past its maximum runtime."""
    return (f"Workload exceeded its maximum runtime ({format_duration(job.max_runtime or 0.0)}), evicting pod: "
            f"{task.namespace}/{task.name}")


def runtimelimit(session: Session) -> None:
    touched = changed_jobs(session)
    built = flagged_as_built(session, MEMO, lambda j: j.runtime_end() is not None, touched)
    for uid in sorted(built | touched):
        job = session.jobs.get(uid)
        if job is None:
            continue
        end = job.runtime_end()
        if end is None or session.now < end:
            continue
        with session.contained("runtimelimit", job):
            evict_job(session, job, eviction_message)
