"""The allocate action: place pending jobs on free (or releasing) resources, gang by gang.

Jobs come in queue and job order. For each job one allocation step -- the missing tasks of every
pod set below its gang size, or one more task of an elastic job -- is placed down the job's
subgroup tree, each group on the node sets the plugins give for it (topology domains), in a
statement; a step that cannot be placed completely is rolled back. A step that ends with a pod
set below its gang size except for pipelined tasks is pipelined as a whole, so that no partial
gang is bound. A job that still has pending tasks after a committed step competes again. A step that
raises is rolled back and the job skipped (:meth:`Session.contained <kai.framework.session.Session.contained>`).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from kai.api import ACTIVE_ALLOCATED, ALIVE, ALLOCATED, Job, Task, TaskStatus
from kai.framework.asbuilt import maybe_pending
from kai.framework.gang import group_children, pod_sets_under, root_group, should_pipeline, tasks_to_allocate
from kai.framework.jobqueue import JobQueue
from kai.framework.reservation import reservations

if TYPE_CHECKING:
    from kai.api import PodSet, SubGroup
    from kai.framework.nodes import NodeInfo
    from kai.framework.session import Session
    from kai.framework.statement import Statement

    #: A group of the subgroup tree: the root or a subgroup, or a pod set (a leaf).
    Group = SubGroup | PodSet
    #: Places one group's tasks on a node set: ``(group, tasks, nodes) -> placed``.
    PlaceOn = Callable[[Group, list[Task], list[NodeInfo]], bool]


def allocate(session: Session) -> None:
    jobs: list[Job] = []
    for candidate in maybe_pending(session):
        if not candidate.has_pending():
            continue
        if not candidate.is_ready():
            session.add_job_fit_error(candidate, not_ready_message(candidate))
            continue
        jobs.append(candidate)
    held = reservations(session)
    queue = JobQueue(session, jobs, depth=session.plugins.config.queue_depth("allocate"))
    while (job := queue.pop()) is not None:
        session.allocation_order.append(job)
        with session.contained("allocate", job):
            if allocate_step(session, job):
                if job.has_pending():
                    queue.push(job)
            elif held.policy.enabled:
                held.reserve(job)
                held.explain(job)


def allocate_arrival(session: Session, job: Job) -> bool:
    """Allocate one job that just arrived in the session (:meth:`Session.add_job`), as allocate would
    place it if it were the only pending job: steps until it is placed or a step fails. True when it
    has no pending task left."""
    if not job.is_ready():
        session.add_job_fit_error(job, not_ready_message(job))
        return False
    with session.contained("allocate", job):
        while job.has_pending() and allocate_step(session, job):
            pass
    return not job.has_pending()


def allocate_step(session: Session, job: Job) -> bool:
    """Place the job's next allocation step in a statement of its own and commit it; False (nothing
    changed) when it does not fit completely."""
    stmt = session.statement()
    had_allocated = any(t.status in ALLOCATED for t in job.tasks.values())
    if not allocate_job(session, stmt, job, pipeline_only=False):
        stmt.discard()
        return False
    pipelined = should_pipeline(job)
    if pipelined:
        stmt.convert_allocated_to_pipelined(job.uid)
    stmt.commit()
    if not pipelined and not had_allocated:
        job.last_start = session.now
    return True


def allocate_job(session: Session, stmt: Statement, job: Job, pipeline_only: bool, tasks: list[Task] | None = None,
                 candidates: array[int] | None = None) -> bool:
    """Place the job's next allocation step (or ``tasks``) in ``stmt``; False when it does not fit.

    ``candidates`` (node positions) limits the nodes looked at. A real allocation (not
    ``pipeline_only``) records the job's and the tasks' fit errors, a simulation records none. The nodes other
    jobs reserved are left out unless the job may backfill them (:mod:`kai.framework.reservation`).
    """
    session.pre_job_allocation(job)
    tasks = tasks_to_allocate(session, job) if tasks is None else list(tasks)
    if not tasks:
        return False
    veto = session.job_over_capacity(job, tasks)
    if veto is not None:
        if not pipeline_only:
            session.add_veto_fit_error(job, veto)
        return False
    nodes = session.nodes if candidates is None else [session.nodes[i] for i in candidates]
    if closed := reservations(session).closed_to(job, tasks):
        nodes = [n for n in nodes if n.index not in closed]
    return TreePlacement(session, stmt, job, pipeline_only, nodes).place(tasks)


class TreePlacement:
    """One allocation step placed down the job's subgroup tree, as one unit.

    The root, then each subgroup (by name) and each pod set (in pod-set order) below it, is tried on
    every node set ``kai_subset_nodes`` gives for it (one set, all nodes, without such plugins) in
    order; a set where its part of the step does not fit completely is rolled back before the next.
    """

    def __init__(self, session: Session, stmt: Statement, job: Job, pipeline_only: bool,
                 nodes: list[NodeInfo]) -> None:
        self.session, self.stmt, self.job, self.pipeline_only = session, stmt, job, pipeline_only
        self.nodes = nodes
        self.children = group_children(session, job)

    def place(self, tasks: list[Task]) -> bool:
        root = root_group(self.job)
        return self._try(root, pod_sets_under(self.children, root.name), tasks, self.nodes, self._group_on)

    def _try(self, group: Group, pod_sets: list[str], tasks: list[Task], nodes: list[NodeInfo],
             place_on: PlaceOn) -> bool:
        if not tasks:
            return True
        for node_set in self.session.subset_nodes(self.job, group, pod_sets, tasks, nodes):
            checkpoint = self.stmt.checkpoint()
            if place_on(group, tasks, node_set):
                return True
            self.stmt.rollback(checkpoint)
        return False

    def _group_on(self, group: Group, tasks: list[Task], nodes: list[NodeInfo]) -> bool:
        subgroups, pod_sets = self.children[group.name]
        for sg in subgroups:
            names = pod_sets_under(self.children, sg.name)
            if not self._try(sg, names, [t for t in tasks if t.pod_set in names], nodes, self._group_on):
                return False
        for ps in pod_sets:
            mine = tasks if len(pod_sets) == 1 and not subgroups else [t for t in tasks if t.pod_set == ps.name]
            if not self._try(ps, [ps.name], mine, nodes, self._tasks_on):
                return False
        return True

    def _tasks_on(self, pod_set: Group, tasks: list[Task], nodes: list[NodeInfo]) -> bool:
        candidates = None if nodes is self.session.nodes else array("i", (n.index for n in nodes))
        for task in tasks:
            why = allocate_task(self.session, self.stmt, self.job, task, self.pipeline_only, candidates)
            if why is not None:
                if not self.pipeline_only:
                    self.session.add_job_fit_error(self.job, _step_failure(self.job, task, why))
                return False
        return True


def allocate_task(session: Session, stmt: Statement, job: Job, task: Task, pipeline_only: bool,
                  candidates: array[int] | None = None) -> str | None:
    """Place one task on its best node (of ``candidates``, node positions; default all); return None on
    success, else the reason it found none."""
    veto = session.pre_predicate(task, job)
    if veto is not None:
        if not pipeline_only:
            session.task_fit_errors[task.uid] = str(veto)
        return str(veto)
    reasons: Counter[str] | None = Counter() if session.explain and not pipeline_only else None
    for node, fits_idle in session.node_choices(task, job, candidates, reasons=reasons):
        if stmt.place(task, node, fits_idle, pipeline_only) is not None:
            return None
    return "no node fits" if reasons is None else session.set_task_fit_error(task, reasons)


def _step_failure(job: Job, task: Task, why: str) -> str:
    """KAI's job-level message for a failed allocation step (the step's placed tasks are still active)."""
    ps = job.pod_sets[task.pod_set]
    active = job.count(ps.name, ACTIVE_ALLOCATED)
    if ps.min_available <= 1 or active >= ps.min_available:
        return f"Resources were not found for pod {task.namespace}/{task.name} due to: {why}"
    found = sum(job.count(n, ACTIVE_ALLOCATED) for n in job.pod_sets)
    if len(job.pod_sets) == 1:
        return (f"Resources were found for {found} pods while {ps.min_available} are required for gang "
                f"scheduling. Additional pods cannot be scheduled due to: {why}")
    return (f"Resources were found for {found} pods from all sub-groups while sub-group {ps.name} requires "
            f"{ps.min_available} pods for gang scheduling. Additional pods cannot be scheduled in this "
            f"sub-group due to: {why}")


def not_ready_message(job: Job) -> str:
    """KAI's NotReady message: the job has fewer pods than its gang needs."""
    for name, ps in job.pod_sets.items():
        tasks = job.tasks_of(name)
        alive = sum(1 for t in tasks if t.status in ALIVE)
        gated = sum(1 for t in tasks if t.status is TaskStatus.GATED)
        if alive - gated < ps.min_available:
            where = "" if name == "default" else f" for SubGroup {name}"
            return (f"Job is not ready for scheduling. Waiting for {ps.min_available} pods{where}, "
                    f"currently {alive} exist, {gated} are gated")
    return "Job is not ready for scheduling"
