"""The preempt action: evict lower-priority preemptible jobs of the same queue for a pending job.

Victims: preemptible jobs of the preemptor's queue with a strictly lower priority that hold
resources, and that no plugin vetoes (``kai_victim_filter`` with action ``"preempt"``). Solutions
are judged by ``kai_scenario_validator``. A non-preemptible preemptor stays within its queue's
deserved quota through the queue capacity check of the simulated placement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.actions import eviction
from kai.actions.solver import JobSolver, validator_hook
from kai.api import Job, Task
from kai.framework.jobqueue import JobQueue

if TYPE_CHECKING:
    from kai.framework.session import Session


def messages(session: Session, tasks: list[Task], preemptor: Job) -> list[str]:
    return [f"Pod {t.namespace}/{t.name} was preempted by higher priority workload "
            f"{preemptor.namespace}/{preemptor.name}" for t in tasks]


def victims(session: Session, preemptor: Job) -> JobQueue:
    return eviction.victim_queue(session, (
        j for j in session.jobs.values()
        if j.preemptible and j.priority < preemptor.priority and j.queue == preemptor.queue and j is not preemptor
        and eviction.has_running_tasks(session, j) and eviction.alive_on_known_node(session, j)
        and not eviction.vetoed_victim(session, "preempt", preemptor, j)))


def preempt(session: Session) -> None:
    solver = JobSolver(session, "preempt", lambda job: victims(session, job), validator_hook("preempt"), messages)
    eviction.run(session, "preempt", eviction.pending_ready_jobs(session), solver, lambda job: True, per_queue=True)
