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

import bisect
import heapq
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, cast

import attrs

from kai.api import ACTIVE_ALLOCATED, Job, Task, TaskStatus
from kai.framework.actions.allocate import allocate_job
from kai.framework.gang import evictable, tasks_to_allocate, tasks_to_evict
from kai.framework.jobqueue import JobQueue
from kai.framework.statement import Statement

if TYPE_CHECKING:
    from kai.framework.session import Session


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
Validator = Callable[["Session", Scenario], bool]
#: Eviction messages of victim tasks evicted together: ``(session, victim tasks, preemptor) -> [str]``.
Messenger = Callable[["Session", list[Task], Job], list[str]]


def validator_hook(action: str) -> Validator:
    """The validator of ``action`` that asks the plugins (``kai_scenario_validator``)."""

    def validate(session: Session, scenario: Scenario) -> bool:
        return session.hook.kai_scenario_validator(session=session, action=action, scenario=scenario) is None

    return validate


def job_view(job: Job, tasks: Iterable[Task]) -> Job:
    """A stand-in for ``job`` holding only ``tasks`` (a victim group, or what is left of a victim job)."""
    return attrs.evolve(job, tasks={t.name: t for t in tasks})


def feasible_node_names(session: Session, job: Job) -> set[str]:
    """KAI's nodes worth looking at for ``job``: all nodes when a task needs no GPU, else the nodes
    with idle or releasing GPUs (whole, MIG slices or free portions of shared devices)."""
    if any(t.request.quota_gpus(dra=False) <= 0 for t in job.tasks.values()):
        return {n.name for n in session.nodes}
    return {n.name for n in session.nodes if n.idle_gpu_sum() > 0 or n.releasing_gpu_sum() > 0}


def _gpus(task: Task) -> float:
    """The GPUs KAI's idle-GPU filter counts for a task: whole devices and fractions (not MIG, not memory)."""
    r = task.request
    return r.gpus + r.gpu_fraction * r.gpu_devices


class IdleGpus:
    """KAI's cheap pre-check of a scenario: the step's GPU requests (largest first) must fit greedily into
    the nodes with the most idle + releasing GPUs, counting the GPUs the scenario's victims free."""

    def __init__(self, session: Session, pending: list[Task]) -> None:
        self.required = sorted((_gpus(t) for t in pending), reverse=True)
        self.capacity = {n.name: n.idle_gpu_sum() + n.releasing_gpu_sum() for n in session.nodes}
        self.size = len(self.required)
        #: The ``size`` nodes with the most GPUs, as (-GPUs, name), best first.
        self.top = sorted((-c, name) for c, name in heapq.nlargest(self.size, ((c, n) for n, c in
                                                                                 self.capacity.items())))
        #: With equal requests (the usual gang): how many of them the top nodes hold.
        self.unit = self.required[0] if self.required and self.required[0] == self.required[-1] > 0 else None
        self.held = sum(self._holds(-neg) for neg, _ in self.top)
        self.in_top = {name for _, name in self.top}

    def _holds(self, gpus: float) -> int:
        return int(gpus // self.unit) if self.unit else 0

    def _raise(self, node: str, gpus: float) -> None:
        old = self.capacity.get(node, 0.0)
        self.capacity[node] = new = old + gpus
        top = self.top
        if node in self.in_top:
            del top[bisect.bisect_left(top, (-old, node))]
            self.held -= self._holds(old)
        elif len(top) >= self.size and (not top or -new >= top[-1][0]):
            return
        bisect.insort(top, (-new, node))
        self.in_top.add(node)
        self.held += self._holds(new)
        for neg, name in top[self.size:]:
            self.held -= self._holds(-neg)
            self.in_top.discard(name)
        del top[self.size:]

    def passes(self, victims: Iterable[Task]) -> bool:
        """Count the GPUs ``victims`` free and check the step against the best nodes. Each victim is given
        once (one counted twice would only let a scenario through to the simulation)."""
        for t in victims:
            gpus = _gpus(t)
            if gpus and t.node:
                self._raise(t.node, gpus)
        if self.unit:
            return self.held >= self.size
        if not self.required or self.required[0] == 0:
            return True
        taken = [0.0] * len(self.top)
        for need in self.required:
            if need == 0:
                return True
            for k, (neg, _) in enumerate(self.top):
                if -neg < need:
                    return False
                if -neg - taken[k] >= need:
                    taken[k] += need
                    break
            else:
                return False
        return True


def _matches(task: Task, labels: dict[str, str]) -> bool:
    """The task's node selector and required node affinity accept a node with ``labels``."""
    if any(labels.get(k) != v for k, v in task.node_selector.items()):
        return False
    return not task.node_affinity or any(all(r.matches(labels) for r in term) for term in task.node_affinity)


class NodeAffinities:
    """KAI's other cheap pre-check: every task of the step with a node selector or a required node
    affinity must match some node among the feasible nodes and the nodes of the scenario's victims."""

    def __init__(self, session: Session, pending: list[Task], nodes: set[str]) -> None:
        self.session = session
        self.nodes = set(nodes)
        self.unmatched = [t for t in pending if (t.node_selector or t.node_affinity)
                          and not any(_matches(t, session.node_by_name[n].labels)
                                      for n in self.nodes if n in session.node_by_name)]

    def passes(self, victims: Iterable[Task]) -> bool:
        if not self.unmatched:
            return True
        for t in victims:
            if self.unmatched and t.node and t.node in self.session.node_by_name and t.node not in self.nodes:
                self.nodes.add(t.node)
                labels = self.session.node_by_name[t.node].labels
                self.unmatched = [u for u in self.unmatched if not _matches(u, labels)]
        return not self.unmatched


class VictimStream:
    """The victim groups of one solve in victim order, for each partial step.

    Every partial step pops a fresh victim queue; a popped job overlapping the recorded victims is
    skipped (what is left of it goes back). While every popped job is taken whole (no elastic shrink,
    nothing left), skipping and taking change the queue alike, so the groups popped once are replayed
    for the next partial steps instead of popping again. The first job that is not taken whole ends
    the replay for the rest of the solve.
    """

    def __init__(self, session: Session, queue: JobQueue) -> None:
        self.session = session
        self.initial = queue
        self.live = queue.copy()
        #: The whole jobs popped so far, each with its task uids.
        self.popped: list[tuple[Job, tuple[str, ...]]] = []
        self.replayable = True

    def groups(self, recorded_uids: set[str]) -> Iterator[Job]:
        if not self.replayable:
            yield from self._pop_all(self.initial.copy(), recorded_uids)
            return
        for group, uids in self.popped:
            if recorded_uids.isdisjoint(uids):
                yield group
        while (view := self.live.pop()) is not None:
            tasks, more = tasks_to_evict(self.session, view)
            if not more and tasks and len(tasks) == len(view.tasks):
                uids = tuple(t.uid for t in view.tasks.values())
                self.popped.append((view, uids))
                if recorded_uids.isdisjoint(uids):
                    yield view
                continue
            self.replayable = False
            taken = self._take(self.live, view, tasks, more, recorded_uids)
            if taken is not None:
                yield taken
            yield from self._pop_all(self.live, recorded_uids)
            return

    def _pop_all(self, queue: JobQueue, recorded_uids: set[str]) -> Iterator[Job]:
        while (view := queue.pop()) is not None:
            group = self._take(queue, view, *tasks_to_evict(self.session, view), recorded_uids)
            if group is not None:
                yield group

    @staticmethod
    def _take(queue: JobQueue, view: Job, tasks: list[Task], more: bool, recorded_uids: set[str]) -> Job | None:
        """The victim group of a popped job (None when it overlaps the recorded victims or has nothing to
        evict); what is left of the job goes back into the queue."""
        if any(t.uid in recorded_uids for t in tasks):
            rest = [t for t in view.tasks.values() if t.uid not in recorded_uids]
            if rest:
                queue.push(job_view(view, rest))
            return None
        if more:
            taken = {t.uid for t in tasks}
            queue.push(job_view(view, [t for t in view.tasks.values() if t.uid not in taken]))
        if not tasks:
            return None
        return view if len(tasks) == len(view.tasks) else job_view(view, tasks)


class _Potential(list[Job]):
    """The victim groups added to a partial step's scenarios, in the order added."""

    def tasks(self) -> list[Task]:
        return [t for g in self for t in g.tasks.values()]

    def of_jobs_on(self, node: str) -> list[Job]:
        """Every group of the jobs that have a potential victim task on ``node``, in the order added."""
        uids: set[str] = set()
        for g in self:
            for t in g.tasks.values():
                if t.node == node:
                    uids.add(g.uid)
                    break
        return [g for g in self if g.uid in uids]


def _to_place(session: Session, job: Job) -> Iterator[Task]:
    """The tasks of ``job`` a simulation may place: pending ones and those evicted in this session."""
    return (t for t in job.tasks.values() if t.status is TaskStatus.PENDING or t.uid in session.evicted)


class _Room:
    """The most of each resource any candidate node has left (idle + releasing): a task asking more
    fits nowhere, and placements only use up room, so its job need not be tried."""

    def __init__(self, session: Session, positions: array[int]) -> None:
        self.arrays, self.positions = session.arrays, positions
        self.most: list[float] | None = None

    def changed(self) -> None:
        self.most = None

    def may_fit(self, tasks: Iterable[Task]) -> bool:
        """Whether some task of ``tasks`` could fit a candidate node (False when there is none)."""
        if self.most is None:
            a = self.arrays
            self.most = [max((a.idle_cpu[i] + a.rel_cpu[i] for i in self.positions), default=0.0),
                         max((a.idle_mem[i] + a.rel_mem[i] for i in self.positions), default=0.0),
                         max((a.idle_gpu[i] + a.rel_gpu[i] for i in self.positions), default=0.0),
                         max((a.idle_pods[i] + a.rel_pods[i] for i in self.positions), default=0.0)]
        cpu, mem, gpu, pods = self.most
        eps = 1e-9
        return pods >= 1 - eps and any(
            t.request.cpu <= cpu + eps and t.request.memory <= mem + eps and t.request.gpus <= gpu + eps
            for t in tasks)


@attrs.define(eq=False)
class _Solution:
    statement: Statement
    #: The victim groups with a task evicted or moved: the recorded victims of the next partial step.
    groups: list[Job]


class JobSolver:
    """Finds victims for pending jobs; one solver per action run.

    ``victim_queue(job)`` builds the victim queue of a preemptor (a reversed :class:`JobQueue`);
    ``validate`` judges a simulated scenario; ``messages`` gives the eviction messages of victims.
    """

    def __init__(self, session: Session, victim_queue: Callable[[Job], JobQueue], validate: Validator | None,
                 messages: Messenger) -> None:
        self.session = session
        self.victim_queue = victim_queue
        self.validate = validate
        self.messages = messages

    def solve(self, job: Job) -> Statement | None:
        """A statement placing the job's next step over victims (not committed), or None."""
        session = self.session
        steps = tasks_to_allocate(session, job)
        if not steps:
            return None
        before = sum(1 for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED or t.status is TaskStatus.RELEASING)
        base_nodes = feasible_node_names(session, job)
        self._victims = VictimStream(session, self.victim_queue(job))
        self._pending_jobs = [j for j in session.jobs.values() if j.has_pending()]
        self._sorted: list[Job] = []
        self._known: set[str] = set()
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

    def _order(self, jobs: list[Job]) -> JobQueue:
        """The simulation's job queue. While the victims are whole jobs, each job is in the same state at
        the start of every simulation of the solve, so their job order is kept and only new jobs sorted in."""
        if not self._victims.replayable:
            return JobQueue(self.session, jobs)
        key = self.session.job_key
        for j in jobs:
            if j.uid not in self._known:
                self._known.add(j.uid)
                bisect.insort(self._sorted, j, key=key)
        members = {j.uid for j in jobs}
        return JobQueue(self.session, [j for j in self._sorted if j.uid in members], presorted=True)

    # --- one partial step: scenarios of growing size ----------------------------------------------

    def _solve_partial(self, job: Job, pending: list[Task], recorded: list[Job],
                       base_nodes: set[str]) -> _Solution | None:
        nodes = set(base_nodes)
        recorded_tasks = [t for g in recorded for t in g.tasks.values()]
        nodes.update(t.node for t in recorded_tasks if t.node)
        recorded_uids = {t.uid for t in recorded_tasks}
        affinities, idle_gpus = NodeAffinities(self.session, pending, nodes), IdleGpus(self.session, pending)
        potential = _Potential()
        if recorded and affinities.passes(recorded_tasks) & idle_gpus.passes(recorded_tasks):
            solution = self._try(job, pending, recorded, potential, nodes)
            if solution is not None:
                return solution
        for group in self._victims.groups(recorded_uids):
            potential.append(group)
            tasks = group.tasks.values()
            if not affinities.passes(tasks) & idle_gpus.passes(tasks):  # both filters count every victim
                continue
            solution = self._try(job, pending, recorded, potential, nodes)
            if solution is not None:
                return solution
        return None

    # --- one scenario: node by node -------------------------------------------------------------

    def _try(self, job: Job, pending: list[Task], recorded: list[Job], potential: _Potential,
             nodes: set[str]) -> _Solution | None:
        """Simulate the scenario node by node; the first valid solution (statement not committed), or None."""
        session = self.session
        stmt = session.statement()
        recorded_tasks = [t for g in recorded for t in g.tasks.values()]
        self._evict(stmt, job, recorded_tasks)
        candidates = recorded_tasks + potential.tasks()
        if not potential:
            solution = self._simulate(stmt, job, pending, recorded, recorded_tasks, candidates, nodes)
            if solution is None:
                stmt.discard()
            return solution
        latest = session.jobs[potential[-1].uid]
        # a task on a node that is gone is no victim: nothing to simulate there
        for node_name in dict.fromkeys(t.node for t in latest.tasks.values()
                                       if t.node and t.node in session.node_by_name):
            cp = stmt.checkpoint()
            groups = potential.of_jobs_on(node_name)
            tasks = [t for g in groups for t in g.tasks.values() if evictable(session, t)]
            here = nodes | cast("set[str]", {t.node for t in tasks})  # victims are placed: they have a node
            self._evict(stmt, job, tasks)
            solution = self._simulate(stmt, job, pending, recorded + groups, recorded_tasks + tasks, candidates, here)
            if solution is not None:
                return solution
            stmt.rollback(cp)
        stmt.discard()
        return None

    def _evict(self, stmt: Statement, job: Job, tasks: list[Task]) -> None:
        messages = self.messages(self.session, tasks, job)
        for task, message in zip(tasks, messages):
            if evictable(self.session, task):
                stmt.evict(task, message)

    def _simulate(self, stmt: Statement, job: Job, pending: list[Task], groups: list[Job], victim_tasks: list[Task],
                  candidates: list[Task], nodes: set[str]) -> _Solution | None:
        """Place the victims again and the job's ``pending`` tasks, pipeline-only, in queue order."""
        session = self.session
        positions = array("i", sorted(session.node_by_name[n].index for n in nodes if n in session.node_by_name))
        # victims come in victim order (last job first): reversed, the queue's sort is one pass
        wanted = dict.fromkeys(t.job for t in reversed(victim_tasks))
        wanted[job.uid] = None
        others = [j for j in self._pending_jobs if j.uid not in wanted]
        order = self._order(others + [session.jobs[uid] for uid in wanted])
        room = _Room(session, positions)
        placed = False
        while wanted and (next_job := order.pop()) is not None:
            if next_job.uid not in wanted:
                continue
            del wanted[next_job.uid]
            if next_job is job:
                if not allocate_job(session, stmt, job, True, tasks=pending, candidates=positions):
                    return None
                placed = True
            elif room.may_fit(_to_place(session, next_job)):
                tasks = tasks_to_allocate(session, next_job, also=session.evicted)
                cp = stmt.checkpoint()
                if not tasks or not allocate_job(session, stmt, next_job, True, tasks=tasks, candidates=positions):
                    stmt.rollback(cp)
                    continue
            else:
                continue
            room.changed()
            # placements only use up room: once the job is placed and no victim left could fit, stop
            if placed and not any(room.may_fit(_to_place(session, session.jobs[uid])) for uid in wanted):
                break
        victims = [t for t in victim_tasks if t.status is TaskStatus.RELEASING]
        moved = [t for t in victim_tasks if t.status is TaskStatus.PIPELINED]
        kept = {t.uid for t in victims + moved}
        chosen = [g for g in groups if any(t.uid in kept for t in g.tasks.values())]
        owners = list({t.job: session.jobs[t.job] for t in victims + moved}.values())
        scenario = Scenario(job, list(pending), candidates, victims, moved, owners)
        if self.validate is not None and not self.validate(session, scenario):
            return None
        return _Solution(stmt, chosen)
