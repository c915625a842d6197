"""Journal: what a session changed on the shared objects of its snapshot, so that it can be put back.

A session changes the tasks and jobs of its snapshot as it decides (a task's status, node, shared GPU
devices, NUMA placement and claim allocations; a job's start, staleness and eviction times and reservation), adds
arriving jobs and reports problems found when it opens. The journal keeps each changed object's
fields as they were before its first change, the jobs added and the problems reported before the
session, and :meth:`Journal.rewind` restores them: the snapshot is then as it was built, and another
session can start from it without rebuilding the domain objects.

The session journals the tasks it moves with their jobs (``Session.keep``); code that changes a task
or a job any other way calls ``Session.keep``, :meth:`Journal.task` or :meth:`Journal.job` first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kai.api import Job, Reservation, Task, TaskStatus, ZonePlacement

if TYPE_CHECKING:
    from kai.framework.snapshot import Snapshot

#: A task's fields in the order of TASK_FIELDS (the claim allocations and the extended claim: DRA types).
_TaskFields = tuple[TaskStatus, str | None, tuple[str, ...], tuple[ZonePlacement, ...] | None, Any, Any]
_JobFields = tuple[float | None, float | None, float | None, Reservation | None]

#: The fields of a task a session may change.
TASK_FIELDS = ("status", "node", "gpu_groups", "numa_placement", "claim_allocations", "extended_claim")
#: The fields of a job a session may change.
JOB_FIELDS = ("last_start", "stale_since", "last_eviction", "reservation")


class Journal:
    """The original fields of the tasks and jobs a session changed, by object identity."""

    __slots__ = ("tasks", "jobs", "added_jobs", "problems")

    def __init__(self, problems: int) -> None:
        self.tasks: dict[int, tuple[Task, _TaskFields]] = {}
        self.jobs: dict[int, tuple[Job, _JobFields]] = {}
        #: Uids of the jobs that arrived in the session (``Session.add_job``).
        self.added_jobs: list[str] = []
        #: How many problems the snapshot had before the session.
        self.problems = problems

    def task(self, task: Task) -> None:
        """Keep ``task``'s fields unless they are kept already."""
        if id(task) not in self.tasks:
            self.tasks[id(task)] = (task, (task.status, task.node, task.gpu_groups, task.numa_placement,
                                           task.claim_allocations, task.extended_claim))

    def job(self, job: Job) -> None:
        """Keep ``job``'s fields unless they are kept already."""
        if id(job) not in self.jobs:
            self.jobs[id(job)] = (job, (job.last_start, job.stale_since, job.last_eviction, job.reservation))

    def rewind(self, snapshot: Snapshot) -> None:
        """Put back every kept field, take the added jobs out of ``snapshot`` and drop the problems reported
        since; the journal is empty afterwards."""
        for task, saved in self.tasks.values():
            (task.status, task.node, task.gpu_groups, task.numa_placement, task.claim_allocations,
             task.extended_claim) = saved
        for job, times in self.jobs.values():
            job.last_start, job.stale_since, job.last_eviction, job.reservation = times
        for uid in self.added_jobs:
            snapshot.jobs.pop(uid, None)
        del snapshot.problems[self.problems:]
        self.tasks, self.jobs, self.added_jobs = {}, {}, []
