"""The stalegangeviction action: evict the rest of a gang that has stayed below its minimum too long.

A job is stale when it has a task that holds resources, no task that succeeded, and a pod set with
fewer such tasks than its gang size. A stale job is stamped with the time it became stale; once it
has been stale for its grace period (the job's ``staleness_grace_period``, else the configured one;
negative: never) all
its placed tasks are evicted -- except those bound to a node that is gone, which hold nothing and whose
pods are not evicted by the scheduler. A job that is no longer stale loses its stamp.

Only the jobs that can be stale or stamped are looked at: those the session changed (a task moved, a time
set, arrived) and those that were stale or stamped as the snapshot built them. The latter are worked out once
per snapshot (the snapshot memo) and, for each job the snapshot took over from the one it follows
(:meth:`~kai.framework.Snapshot.follow`), taken from that one's memo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.api import ACTIVE_ALLOCATED, ACTIVE_USED, Job, Task, TaskStatus

if TYPE_CHECKING:
    from kai.framework.session import Session

#: The snapshot memo: job uid -> (the job, whether it was stale or stamped as built).
MEMO = "stalegangeviction"


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
    built = _as_built(session, touched)
    for uid, job in session.jobs.items():
        if uid not in touched and not built.get(uid, (None, True))[1]:
            continue  # as built: neither stale nor stamped
        grace = default if job.staleness_grace_period is None else job.staleness_grace_period
        with session.contained("stalegangeviction", job):
            _evict_if_stale(session, job, grace)


def changed_jobs(session: Session) -> set[str]:
    """Uids of the jobs the session changed so far: a task of theirs moved, a time of theirs set, or arrived."""
    journal = session.journal
    touched = {task.job for task, _ in journal.tasks.values()}
    touched.update(job.uid for job, _ in journal.jobs.values())
    touched.update(journal.added_jobs)
    return touched


def _as_built(session: Session, touched: set[str]) -> dict[str, tuple[Job, bool]]:
    """Whether each job the session has not changed was stale or stamped as the snapshot built it (the memo,
    completed with the jobs an earlier session on the snapshot had changed)."""
    snapshot = session.snapshot
    memo: dict[str, tuple[Job, bool]] | None = snapshot.memo.get(MEMO)  # type: ignore[assignment]
    if memo is None:
        memo = snapshot.memo[MEMO] = {}
    elif len(memo) == len(snapshot.jobs):
        return memo
    before: dict[str, tuple[Job, bool]] = snapshot.memo_before.get(MEMO, {})  # type: ignore[assignment]
    for uid, job in snapshot.jobs.items():
        if uid in memo or uid in touched:
            continue
        kept = before.get(uid)
        memo[uid] = kept if kept is not None and kept[0] is job else (job, job.stale_since is not None or is_stale(job))
    return memo


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
