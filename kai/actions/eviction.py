"""What the eviction actions (consolidation, reclaim, preempt) share: their loop over pending jobs,
victim queues, and KAI's skipping of jobs no easier than one that already failed; and the eviction of a
whole job that stale-gang eviction and runtime limits share (:func:`evict_job`).

Each action takes the pending, ready jobs past their preemption delay in queue order and asks the
job solver for a solution per job; a solution is committed at once (victims evicted, the job
pipelined). When scheduling
signatures are on (``use_scheduling_signatures``), a job is skipped if a job with the same
scheduling constraints already failed in the action and this one is not strictly easier: not
fewer pending tasks, and no smaller request at the first differing position of the sorted requests.
A job whose solve raises is rolled back, recorded as an internal error and skipped. When a job's
search ran out of the action's time budget (or was not attempted for lack of it), the action stops:
the jobs after it are not tried in this cycle. Tasks bound to a node that is gone are never victims
(:func:`kai.framework.gang.evictable`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

from kai.actions.solver import JobSolver
from kai.api import ACTIVE_ALLOCATED, ALIVE, Job, Task, TaskStatus, names
from kai.common.durations import format_duration
from kai.common.times import rfc3339
from kai.framework.asbuilt import maybe_pending
from kai.framework.gang import evictable
from kai.framework.jobqueue import JobQueue

if TYPE_CHECKING:
    from kai.framework.session import Session


def evict_job(session: Session, job: Job, message: Callable[[Job, Task], str]) -> None:
    """Evict, in one statement, every allocated task of ``job`` on a node still known, as far as the disruption
    budgets allow."""
    stmt = session.statement()
    evicted: list[Task] = []
    for task in job.tasks.values():
        if task.status in ACTIVE_ALLOCATED and task.node in session.node_by_name \
                and session.disruptions.forbidding([*evicted, task]) is None:
            evicted.append(task)
            stmt.evict(task, message(job, task))
    stmt.commit()


def has_running_tasks(session: Session, job: Job) -> bool:
    return any(evictable(session, t) for t in job.tasks.values())


def victim_queue(session: Session, jobs: Iterable[Job]) -> JobQueue:
    """Victim order over ``jobs``: the least deserving queue's last job first."""
    return JobQueue(session, list(jobs), reverse=True)


def alive_on_known_node(session: Session, job: Job) -> bool:
    """KAI's victim-queue rule: the job has an alive task, not on a node unknown to the session."""
    return any(t.status in ALIVE and (not t.node or t.node in session.node_by_name) for t in job.tasks.values())


def vetoed_victim(session: Session, action: str, preemptor: Job, victim: Job) -> bool:
    return session.hook.kai_victim_filter(session=session, action=action, preemptor=preemptor, victim=victim) \
        is not None


def _requests(job: Job) -> list[tuple[float, float, float]]:
    return sorted((t.request.quota_gpus(), t.request.cpu, t.request.memory) for t in _pending(job))


def _pending(job: Job) -> list[Task]:
    return [t for t in job.tasks.values() if t.status is TaskStatus.PENDING]


def _leq(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b))


def signature(job: Job) -> Hashable:
    """The job's scheduling constraints (KAI's scheduling-constraints signature, as a hashable value)."""
    pod_sets = []
    for name, ps in job.pod_sets.items():
        pods = sorted({(tuple(sorted(t.node_selector.items())), t.node_affinity, t.pod_affinity,
                        t.pod_anti_affinity, t.tolerations) for t in job.tasks.values()
                       if t.pod_set == name and t.status not in ACTIVE_ALLOCATED}, key=repr)
        pod_sets.append((repr(ps.topology), repr(job.topology), tuple(pods)))
    return job.priority, tuple(sorted(pod_sets, key=repr))


class SmallestFailed:
    """Per scheduling signature, the smallest job that failed so far."""

    def __init__(self) -> None:
        self.jobs: dict[Hashable, Job] = {}

    def worth_trying(self, job: Job) -> bool:
        failed = self.jobs.get(signature(job))
        if failed is None:
            return True
        mine, theirs = _requests(job), _requests(failed)
        if not mine or not theirs:
            return False
        if len(theirs) > len(mine):
            return True
        for i, r in enumerate(mine):
            if i >= len(theirs):
                return False
            if _leq(r, theirs[i]):
                if _leq(theirs[i], r):
                    continue
                return True
        return False

    def failed(self, job: Job) -> None:
        key = signature(job)
        current = self.jobs.get(key)
        if current is not None:
            mine, theirs = _requests(job), _requests(current)
            if not mine or not theirs or len(mine) > len(theirs) or not all(map(_leq, mine, theirs)):
                return
        self.jobs[key] = job


def run(session: Session, action: str, candidates: list[Job], solver: JobSolver, may_try: Callable[[Job], bool],
        per_queue: bool) -> None:
    """Solve for each candidate in queue order and commit what is solved; a job whose solve raises is rolled
    back and skipped, the others go on; a spent search budget ends the action."""
    use_signatures = session.plugins.config.use_scheduling_signatures
    failed: dict[str | None, SmallestFailed] = {}
    queue = JobQueue(session, candidates, depth=session.plugins.config.queue_depth(action))
    while (job := queue.pop()) is not None:
        with session.contained(action, job):
            if not may_try(job):
                continue
            smallest = failed.setdefault(job.queue if per_queue else None, SmallestFailed())
            if use_signatures and not smallest.worth_trying(job):
                continue
            session.hook.kai_job_solution_start(session=session, job=job)
            result = solver.solve(job)
            if result.statement is not None:
                result.statement.commit()
            elif result.reason.stops_action:
                return
            else:
                smallest.failed(job)


def pending_ready_jobs(session: Session, preemptible_only: bool = False) -> list[Job]:
    """The jobs an eviction action may make room for: pending, ready, and past their preemption delay
    (a job still within it gets KAI's ``PreemptionDelayNotElapsed`` fit error, once). Only the jobs the session
    changed and those with pending tasks as built are looked at (:mod:`kai.framework.asbuilt`)."""
    jobs = []
    for j in maybe_pending(session):  # in the session's order
        if not (j.has_pending() and j.is_ready() and (j.preemptible or not preemptible_only)):
            continue
        end = j.preemption_delay_end()
        if end is not None and session.now < end:
            _preemption_delay_fit_error(session, j, end)
            continue
        jobs.append(j)
    return jobs


def _preemption_delay_fit_error(session: Session, job: Job, end: float) -> None:
    if any(e.reason == names.UNSCHEDULABLE_PREEMPTION_DELAY for e in session.job_fit_errors.get(job.uid, [])):
        return
    when = rfc3339(end)
    message = (f"Workload is within its preemption delay window ({format_duration(job.preemption_delay or 0.0)}) "
               f"and may not trigger evictions before {when}")
    session.add_job_fit_error(job, message, reason=names.UNSCHEDULABLE_PREEMPTION_DELAY)
