"""The job solver of the eviction actions (consolidation, reclaim, preempt).

For a pending job the solver looks for victims whose eviction lets the job's next allocation step
fit. It grows the step one task at a time: the victims that made room for the first *k* tasks are
kept (recorded) when solving for *k + 1*. For each partial step it tries scenarios of growing size:
first the recorded victims alone, then each time one more *victim group* -- the next eviction step
of the next job of the victim queue (an elastic job gives one task at a time down to its gang size,
then the rest at once; what is left of a job goes back into the queue).

A scenario is simulated node by node: on one node of the newest victim job, every victim-group job
with a task there is evicted (with the recorded victims), then the victims are placed again and the
job is placed, pipeline-only, in queue order. Victims that found a place elsewhere are *moved*, the
others stay evicted. The action's validator judges the result; a rejected or failed node is rolled
back and the next node tried. Everything happens in one Statement; the caller commits the solution.
"""

from __future__ import annotations

from array import array
from typing import Callable

import attrs

from kai.api import ACTIVE_ALLOCATED, Job, Task, TaskStatus
from kai.framework.actions.allocate import allocate_job
from kai.framework.gang import tasks_to_allocate, tasks_to_evict
from kai.framework.jobqueue import JobQueue
from kai.framework.statement import Statement


@attrs.define(eq=False)
class Scenario:
    """A solved scenario as validators see it (``kai_scenario_validator``)."""

    #: The job being placed.
    preemptor: Job
    #: Its tasks placed in this scenario (a prefix of its next allocation step).
    preemptor_tasks: list[Task]
    #: Every victim candidate task of the scenario, in the order the solver added them (recorded first).
    candidates: list[Task]
    #: Victim tasks evicted for good: still Releasing after the simulation.
    victims: list[Task] = attrs.Factory(list)
    #: Victim tasks placed again elsewhere (Pipelined on their new node).
    moved: list[Task] = attrs.Factory(list)
    #: The jobs owning the tasks of ``victims`` and ``moved``.
    victim_jobs: list[Job] = attrs.Factory(list)


#: A validator: ``(session, scenario) -> True`` when the scenario is acceptable.
Validator = Callable[[object, Scenario], bool]
#: Eviction message of a victim task: ``(session, victim task, preemptor) -> str``.
Messenger = Callable[[object, Task, Job], str]


def validator_hook(action: str) -> Validator:
    """The validator of ``action`` that asks the plugins (``kai_scenario_validator``)."""

    def validate(session, scenario: Scenario) -> bool:
        return session.hook.kai_scenario_validator(session=session, action=action, scenario=scenario) is None

    return validate


def job_view(job: Job, tasks) -> Job:
    """A stand-in for ``job`` holding only ``tasks`` (a victim group, or what is left of a victim job)."""
    return attrs.evolve(job, tasks={t.name: t for t in tasks})


def feasible_node_names(session, job: Job) -> set[str]:
    """KAI's nodes worth looking at for ``job``: all nodes when a task needs no GPU, else the nodes
    with idle or releasing GPUs (whole, MIG slices or free portions of shared devices)."""
    if any(t.request.quota_gpus() <= 0 for t in job.tasks.values()):
        return {n.name for n in session.nodes}
    return {n.name for n in session.nodes if n.idle_gpu_sum() > 0 or n.releasing_gpu_sum() > 0}


@attrs.define(eq=False)
class _Solution:
    statement: Statement
    victims: list[Task]
    groups: list[Job]


class JobSolver:
    """Finds victims for pending jobs; one solver per action run.

    ``victim_queue(job)`` builds the victim queue of a preemptor (a reversed :class:`JobQueue`);
    ``validate`` judges a simulated scenario; ``message`` gives the eviction message of a victim.
    """

    def __init__(self, session, victim_queue: Callable[[Job], JobQueue], validate: Validator | None,
                 message: Messenger):
        self.session = session
        self.victim_queue = victim_queue
        self.validate = validate
        self.message = message

    def solve(self, job: Job) -> Statement | None:
        """A statement placing the job's next step over victims (not committed), or None."""
        session = self.session
        steps = tasks_to_allocate(session, job)
        if not steps:
            return None
        before = sum(1 for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED or t.status is TaskStatus.RELEASING)
        base_nodes = feasible_node_names(session, job)
        recorded: list[Job] = []
        solution = None
        for k in range(1, len(steps) + 1):
            solution = self._solve_partial(job, steps[:k], recorded, base_nodes)
            if solution is None:
                return None
            if k < len(steps):
                solution.statement.discard()
            recorded = solution.groups
        after = sum(1 for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED or t.status is TaskStatus.RELEASING)
        if solution is None or not job.is_gang_satisfied() or after <= before:
            if solution is not None:
                solution.statement.discard()
            return None
        return solution.statement

    # --- one partial step: scenarios of growing size ----------------------------------------------

    def _solve_partial(self, job: Job, pending: list[Task], recorded: list[Job], base_nodes: set[str]):
        nodes = set(base_nodes)
        recorded_tasks = [t for g in recorded for t in g.tasks.values()]
        nodes.update(t.node for t in recorded_tasks if t.node)
        recorded_uids = {t.uid for t in recorded_tasks}
        queue = self.victim_queue(job)
        potential: list[Job] = []
        if recorded:
            solution = self._try(job, pending, recorded, potential, nodes)
            if solution is not None:
                return solution
        while True:
            group = self._next_group(queue, recorded_uids)
            if group is False:
                return None
            if group is None:
                continue
            potential.append(group)
            solution = self._try(job, pending, recorded, potential, nodes)
            if solution is not None:
                return solution

    def _next_group(self, queue: JobQueue, recorded_uids: set[str]):
        """The next victim group from the queue; None when the popped job overlaps the recorded victims
        (what is left of it goes back), False when the queue is empty."""
        view = queue.pop()
        if view is None:
            return False
        tasks, more = tasks_to_evict(self.session, view)
        if any(t.uid in recorded_uids for t in tasks):
            rest = [t for t in view.tasks.values() if t.uid not in recorded_uids]
            if rest:
                queue.push(job_view(view, rest))
            return None
        if more:
            taken = {t.uid for t in tasks}
            queue.push(job_view(view, [t for t in view.tasks.values() if t.uid not in taken]))
        return job_view(view, tasks) if tasks else None

    # --- one scenario: node by node -------------------------------------------------------------

    def _try(self, job: Job, pending: list[Task], recorded: list[Job], potential: list[Job],
             nodes: set[str]) -> _Solution | None:
        """Simulate the scenario node by node; the first valid solution (statement not committed), or None."""
        session = self.session
        stmt = session.statement()
        recorded_tasks = [t for g in recorded for t in g.tasks.values()]
        self._evict(stmt, job, recorded_tasks)
        candidates = recorded_tasks + [t for g in potential for t in g.tasks.values()]
        if not potential:
            solution = self._simulate(stmt, job, pending, recorded, recorded_tasks, candidates, nodes)
            if solution is None:
                stmt.discard()
            return solution
        latest = session.jobs[potential[-1].uid]
        for node_name in dict.fromkeys(t.node for t in latest.tasks.values() if t.node):
            cp = stmt.checkpoint()
            on_node = {g.uid for g in potential if any(t.node == node_name for t in g.tasks.values())}
            groups = [g for g in potential if g.uid in on_node]
            tasks = [t for g in groups for t in g.tasks.values() if t.status in ACTIVE_ALLOCATED]
            self._evict(stmt, job, tasks)
            here = nodes | {t.node for t in tasks}
            solution = self._simulate(stmt, job, pending, recorded + groups, recorded_tasks + tasks, candidates, here)
            if solution is not None:
                return solution
            stmt.rollback(cp)
        stmt.discard()
        return None

    def _evict(self, stmt: Statement, job: Job, tasks: list[Task]) -> None:
        messages = [self.message(self.session, t, job) for t in tasks]
        for task, message in zip(tasks, messages):
            if task.status in ACTIVE_ALLOCATED:
                stmt.evict(task, message)

    def _simulate(self, stmt: Statement, job: Job, pending: list[Task], groups: list[Job], victim_tasks: list[Task],
                  candidates: list[Task], nodes: set[str]) -> _Solution | None:
        """Place the victims again and the job's ``pending`` tasks, pipeline-only, in queue order."""
        session = self.session
        positions = array("i", sorted(session.node_by_name[n].index for n in nodes))
        victim_jobs = {t.job for t in victim_tasks}
        wanted = victim_jobs | {job.uid}
        others = [j for j in session.jobs.values() if j.uid not in wanted and j.has_pending()]
        order = JobQueue(session, others + [session.jobs[uid] for uid in wanted])
        while wanted and (next_job := order.pop()) is not None:
            if next_job.uid not in wanted:
                continue
            wanted.discard(next_job.uid)
            if next_job is job:
                if not allocate_job(session, stmt, job, True, tasks=pending, candidates=positions):
                    return None
                continue
            tasks = tasks_to_allocate(session, next_job, also=session.evicted)
            if tasks:
                cp = stmt.checkpoint()
                if not allocate_job(session, stmt, next_job, True, tasks=tasks, candidates=positions):
                    stmt.rollback(cp)
        victims = [t for t in victim_tasks if t.status is TaskStatus.RELEASING]
        moved = [t for t in victim_tasks if t.status is TaskStatus.PIPELINED]
        kept = {t.uid for t in victims + moved}
        chosen = [g for g in groups if any(t.uid in kept for t in g.tasks.values())]
        owners = list({t.job: session.jobs[t.job] for t in victims + moved}.values())
        scenario = Scenario(job, list(pending), candidates, victims, moved, owners)
        if self.validate is not None and not self.validate(session, scenario):
            return None
        return _Solution(stmt, victims + moved, chosen)
