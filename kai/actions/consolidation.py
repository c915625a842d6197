"""The consolidation action: move preemptible pods to other nodes so that a pending job fits.

For a pending, ready, preemptible job, when the cluster's idle and releasing GPUs could hold its
next step, the job solver evicts preemptible jobs of any queue (at most ``max_consolidation_preemptees``
victim jobs are looked at -- KAI lets one more through -- ``-1`` for no limit, ``0`` turns the action
off) and accepts only solutions in which every evicted pod is placed again elsewhere: consolidation
moves pods, it never evicts a job for good.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from kai.actions import eviction
from kai.actions.solver import JobSolver
from kai.api import Job, Task
from kai.framework.gang import tasks_to_allocate
from kai.framework.jobqueue import JobQueue
from kai.framework.scenario import Scenario

if TYPE_CHECKING:
    from kai.framework.nodes import NodeArrays
    from kai.framework.session import Session

NO_LIMIT = -1


def messages(session: Session, tasks: list[Task], preemptor: Job) -> list[str]:
    return [f"Pod {t.namespace}/{t.name} was preempted and rescheduled due to bin packing "
            f"(resource consolidation) procedure" for t in tasks]


def all_moved(session: Session, scenario: Scenario) -> bool:
    return not scenario.victims


def victims(session: Session, preemptor: Job, limit: int) -> JobQueue:
    chosen: list[Job] = []
    for j in session.jobs.values():
        if not j.preemptible or j is preemptor:
            continue
        if limit != NO_LIMIT and len(chosen) > limit:
            break
        if eviction.has_running_tasks(session, j) and eviction.alive_on_known_node(session, j):
            chosen.append(j)
    return eviction.victim_queue(session, chosen)


def enough_gpus(session: Session, job: Job) -> bool:
    """The ready, schedulable nodes' idle and releasing GPUs could hold the job's next step (KAI's pre-check:
    a cordoned node counts as none whatever the job tolerates, as an over-committed one). The sum over the
    nodes is kept while no node's amounts change."""
    wanted = sum(t.request.quota_gpus(dra=False) for t in tasks_to_allocate(session, job))
    arrays = session.arrays
    kept = _FREE_GPUS.get(arrays)
    if kept is None or kept[0] != arrays.changes:
        have = sum(max(n.idle_gpu_sum() + n.releasing_gpu_sum(), 0.0) for n in session.nodes
                   if n.node.ready and not n.node.unschedulable)
        kept = _FREE_GPUS[arrays] = (arrays.changes, have)
    return kept[1] + 1e-9 >= wanted


#: Per session's node amounts: their change count and the ready nodes' free GPUs summed at that count.
_FREE_GPUS: weakref.WeakKeyDictionary[NodeArrays, tuple[int, float]] = weakref.WeakKeyDictionary()


def consolidation(session: Session) -> None:
    limit = session.plugins.config.max_consolidation_preemptees
    solver = JobSolver(session, "consolidation", lambda job: victims(session, job, limit), all_moved, messages)
    if limit == 0:
        return
    eviction.run(session, "consolidation", eviction.pending_ready_jobs(session, preemptible_only=True), solver,
                 lambda job: enough_gpus(session, job), per_queue=False)
