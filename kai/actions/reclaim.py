"""The reclaim action: evict preemptible jobs of other queues for a pending job whose queue is owed
resources.

A job is a reclaimer unless a plugin vetoes it (``kai_can_reclaim``; the ``proportion`` plugin lets a
queue reclaim only up to its fair share). Victims: preemptible jobs of other queues that hold
resources and that no plugin vetoes (``kai_victim_filter`` with action ``"reclaim"``). Solutions are
judged by ``kai_scenario_validator`` (the ``proportion`` plugin's reclaim strategies).

Each victim pod's eviction message names the reclaimer and, on the following lines, the resources of
the two queues involved -- the leaf queues when they share a parent, else their parents -- as the
plugins report them (``kai_queue_resources``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from kai.actions import eviction
from kai.actions.solver import JobSolver, validator_hook
from kai.api import Job, Resources, Task
from kai.framework.jobqueue import JobQueue

if TYPE_CHECKING:
    from kai.framework.session import Session


def _h(value: float, unit: float = 1.0) -> str:
    if value == -1:
        return "Unlimited"
    return f"{value / unit:.3f}".rstrip("0").rstrip(".")


def _amounts(r: Resources) -> str:
    return f"GPU: {_h(r.gpu)}, CPU: {_h(r.cpu, 1000.0)} (cores), memory: {_h(r.memory, 1e9)} (GB)"


def queue_details(session: Session, queue_name: str | None) -> str | None:
    """One queue's line of a reclaim message, or None when no plugin reports its resources."""
    queue = session.queues.get(queue_name) if queue_name else None
    if queue is None:
        return None
    found = session.hook.kai_queue_resources(session=session, queue=queue)
    if found is None:
        return None
    allocated, deserved, fair_share = found
    return (f"{queue.display_name or queue.name} uses <{_amounts(allocated)}> with a quota of <{_amounts(deserved)}>, "
            f"fair-share of <{_amounts(fair_share)}> and queue priority of <{queue.priority}>.")


def messages(session: Session, tasks: list[Task], reclaimer: Job) -> list[str]:
    """The eviction message of each victim task; the queue lines are those of the moment of eviction."""
    mine = session.queues[reclaimer.queue]
    details: dict[str, str] = {}
    out: list[str] = []
    for task in tasks:
        theirs = session.queues[session.jobs[task.job].queue]
        if theirs.name not in details:
            pair = (theirs.name, mine.name) if mine.parent == theirs.parent else (theirs.parent, mine.parent)
            lines = [queue_details(session, q) for q in pair]
            details[theirs.name] = "\n".join(cast("list[str]", lines)) if None not in lines else ""
        out.append(f"Pod {task.namespace}/{task.name} was preempted by workload {reclaimer.namespace}/"
                   f"{reclaimer.name}.\n{details[theirs.name]}")
    return out


def victims(session: Session, reclaimer: Job) -> JobQueue:
    return eviction.victim_queue(session, (
        j for j in session.jobs.values()
        if j.queue != reclaimer.queue and j.preemptible and eviction.has_running_tasks(session, j)
        and not eviction.vetoed_victim(session, "reclaim", reclaimer, j)))


def can_reclaim(session: Session, job: Job) -> bool:
    return session.hook.kai_can_reclaim(session=session, job=job) is None


def reclaim(session: Session) -> None:
    solver = JobSolver(session, "reclaim", lambda job: victims(session, job), validator_hook("reclaim"), messages)
    eviction.run(session, "reclaim", eviction.pending_ready_jobs(session), solver,
                 lambda job: can_reclaim(session, job), per_queue=True)
