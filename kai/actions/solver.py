"""The job solver of the eviction actions (consolidation, reclaim, preempt): KAI v0.17's bounded search.

For a pending job the solver looks for victims whose eviction lets the job's next allocation step
fit. The scenario generators (:mod:`kai.actions.generators`) are tried in turn, each for
the whole job: with one generator the solver searches how many of the step's tasks it can make
room for -- *k* = 1, 2, 4, ... until a probe fails, then bisecting (:func:`max_solvable_k`) -- the
victims that solved a probe being kept (recorded) for the next. If some *k* was solved, the whole
step is probed once more; if that fails, the next generator starts over. Within a probe the
generator's scenarios are simulated one by one until one solves it.

A scenario that was simulated and failed is not simulated again within the job's solve: scenarios
are equal when they place the same number of tasks over the same recorded and the same added
victim tasks, in whatever order they came.

Simulating a scenario evicts its victims, then places the victims again and the job, pipeline-only,
in queue order. Victims that found a place elsewhere are *moved*, the others stay evicted. A scenario
whose victims (evicted or moved) a PodDisruptionBudget forbids (:mod:`kai.framework.disruption`) is
infeasible; a job left unsolved after such a scenario gets a fit error naming the budget. The
action's validator judges the rest. Everything happens in one Statement per scenario; the caller
commits the solution. Time budgets (:mod:`kai.actions.search`) bound the search; what it
did is counted in the session's :class:`~kai.framework.scenariosearch.SearchLog`.
"""

from __future__ import annotations

import bisect
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import attrs

from kai.actions.allocate import allocate_job
from kai.actions.generators import PORTFOLIO, Candidate, Generator, SolveContext
from kai.actions.search import ActionBudget, Deadline, JobBudget, Reason, SearchResult, max_solvable_k
from kai.actions.victims import GpuRoom, VictimStream, gpu_capacity
from kai.api import ACTIVE_ALLOCATED, Job, Task, TaskStatus, names
from kai.framework.disruption import Blocked
from kai.framework.gang import evictable, tasks_to_allocate
from kai.framework.jobqueue import JobQueue
from kai.framework.scenario import Scenario
from kai.framework.statement import Statement

if TYPE_CHECKING:
    from kai.framework.session import Session


#: A validator: ``(session, scenario) -> True`` when the scenario is acceptable.
Validator = Callable[["Session", Scenario], bool]
#: Eviction messages of victim tasks evicted together: ``(session, victim tasks, preemptor) -> [str]``.
Messenger = Callable[["Session", list[Task], Job], list[str]]


def validator_hook(action: str) -> Validator:
    """The validator of ``action`` that asks the plugins (``kai_scenario_validator``)."""

    def validate(session: Session, scenario: Scenario) -> bool:
        return session.hook.kai_scenario_validator(session=session, action=action, scenario=scenario) is None

    return validate


def feasible_node_names(session: Session, job: Job) -> set[str]:
    """KAI's nodes worth looking at for ``job``: all nodes when a task needs no GPU, else the nodes
    with idle or releasing GPUs (whole, MIG slices or free portions of shared devices)."""
    if any(t.request.quota_gpus(dra=False) <= 0 for t in job.tasks.values()):
        return {n.name for n in session.nodes}
    return {n.name for n in session.nodes if n.idle_gpu_sum() > 0 or n.releasing_gpu_sum() > 0}


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
    #: The victim groups with a task evicted or moved: the recorded victims of the next probe.
    groups: list[Job]


def _active(job: Job) -> int:
    return sum(1 for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED or t.status is TaskStatus.RELEASING)


class JobSolver:
    """Finds victims for pending jobs; one solver per action run (its search budget is the action's).

    ``victim_queue(job)`` builds the victim queue of a preemptor (a reversed :class:`JobQueue`);
    ``validate`` judges a simulated scenario; ``messages`` gives the eviction messages of victims.
    ``budget`` defaults to the configured ``scenarioSearchBudgets`` of ``action``, from now on.
    """

    def __init__(self, session: Session, action: str, victim_queue: Callable[[Job], JobQueue],
                 validate: Validator | None, messages: Messenger, budget: ActionBudget | None = None,
                 generators: tuple[tuple[str, Generator], ...] = PORTFOLIO) -> None:
        self.session = session
        self.action = action
        self.victim_queue = victim_queue
        self.validate = validate
        self.messages = messages
        budgets = session.plugins.config.scenario_search_budgets
        session.scenario_search.configured(action, budgets)
        self.budget = budget if budget is not None else ActionBudget(budgets, action)
        self.generators = generators
        self.log = session.scenario_search
        #: The first PodDisruptionBudget that forbade a scenario of the job being solved.
        self._blocked: Blocked | None = None

    def solve(self, job: Job) -> SearchResult:
        """Search victims for the job's next step; a solved result holds the statement (not committed)."""
        self._blocked = None
        result = self._solve(job)
        self.log.jobs[self.action, result.metric_result, result.reduced_budget] += 1
        if result.statement is None and self._blocked is not None:
            self._explain_blocked(job, self._blocked.message())
        return result

    def _explain_blocked(self, job: Job, message: str) -> None:
        """The job's fit error naming the budget that forbade its victims (once per message and session)."""
        if not any(message in e.messages for e in self.session.job_fit_errors.get(job.uid, ())):
            self.session.add_job_fit_error(job, message, reason=names.UNSCHEDULABLE_DISRUPTION_BUDGET)

    def _solve(self, job: Job) -> SearchResult:
        session = self.session
        steps = tasks_to_allocate(session, job)
        if not steps:
            return SearchResult(Reason.GENERATORS_EXHAUSTED, label=Reason.NOT_ATTEMPTED.value)
        budget = self.budget.begin_job()
        if budget.exhausted():
            return SearchResult(Reason.NOT_ATTEMPTED)
        if not self.generators:
            return SearchResult(Reason.NO_GENERATOR, budget.reduced)
        before = _active(job)
        base_nodes = feasible_node_names(session, job)
        self._victims = VictimStream(session, self.victim_queue(job))
        #: Every probe starts from the session as it is now (each probe's statement is discarded).
        self._capacity = gpu_capacity(session)
        self._pending_jobs = [j for j in session.jobs.values() if j.has_pending()]
        self._sorted: list[Job] = []
        self._known: set[str] = set()
        #: Scenarios simulated without success in this job's solve.
        self._failed: set[tuple[int, frozenset[str], frozenset[str]]] = set()
        result = SearchResult(Reason.GENERATORS_EXHAUSTED, budget.reduced)
        for name, generator in self.generators:
            result = self._attempt(job, steps, base_nodes, budget, name, generator)
            if result.reason is Reason.SOLVED:
                stmt = result.statement
                if stmt is not None and (not job.is_gang_satisfied() or _active(job) <= before):
                    stmt.discard()
                    result.statement = None
                return result
            if result.reason.stops_search:
                return result
        return result

    def _attempt(self, job: Job, steps: list[Task], base_nodes: set[str], budget: JobBudget, name: str,
                 generator: Generator) -> SearchResult:
        """One generator's search for the whole step: the largest solvable probe, then the step.

        When the doubling reaches the whole step and solves it, that solution is kept; KAI discards it
        and probes the whole step once more over the victims it chose, which only repeats the work."""
        deadline = budget.begin_generator(name)
        recorded: list[Job] = []
        whole: list[SearchResult] = []

        def probe(k: int) -> SearchResult:
            result, groups = self._probe(job, steps[:k], recorded, base_nodes, budget, deadline, name, generator)
            if result.statement is not None:
                if k == len(steps):  # the whole step: this is the solution
                    whole.append(result)
                    return result
                recorded[:] = groups
                result.statement.discard()
            return result

        solved, result = max_solvable_k(len(steps), probe)
        if whole:
            return whole[0]
        if solved == 0:
            return result or SearchResult(Reason.GENERATORS_EXHAUSTED, budget.reduced)
        return self._probe(job, steps, recorded, base_nodes, budget, deadline, name, generator)[0]

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

    # --- one probe: the generator's scenarios until one solves it -------------------------------------

    def _probe(self, job: Job, pending: list[Task], recorded: list[Job], base_nodes: set[str], budget: JobBudget,
               deadline: Deadline, name: str, generator: Generator) -> tuple[SearchResult, list[Job]]:
        session, log, action = self.session, self.log, self.action
        recorded_tasks = [t for g in recorded for t in g.tasks.values()]
        nodes = base_nodes | {t.node for t in recorded_tasks if t.node}
        recorded_key = frozenset(t.uid for t in recorded_tasks)

        def filtered() -> None:
            log.filtered[action] += 1

        gpu_room = GpuRoom(session, pending, recorded_tasks, self._capacity)
        scenarios = generator(SolveContext(session, pending, list(recorded), nodes, self._victims, filtered,
                                           self._capacity))
        while True:
            if budget.exhausted():
                if self.budget.exhausted():
                    log.action_exhausted[action] += 1
                return SearchResult(Reason.DEADLINE_EXHAUSTED, budget.reduced), []
            if deadline.exhausted():
                break
            started = time.perf_counter()
            candidate = next(scenarios, None)
            if candidate is None:
                log.durations.append((action, name, Reason.GENERATORS_EXHAUSTED.value, time.perf_counter() - started))
                break
            log.scenarios[action, name, "emitted"] += 1
            key = (len(pending), recorded_key, frozenset(t.uid for g in candidate.potential for t in g.tasks.values()))
            if key in self._failed:
                log.scenarios[action, name, "duplicate"] += 1
                log.durations.append((action, name, "duplicate", time.perf_counter() - started))
                continue
            if not gpu_room.may_place(t for g in candidate.potential for t in g.tasks.values()):
                # its victims cannot free the GPUs the probe needs: the simulation could only fail
                self._failed.add(key)
                filtered()
                log.durations.append((action, name, "unsolved", time.perf_counter() - started))
                continue
            log.simulated[action] += 1
            log.scenarios[action, name, "simulated"] += 1
            solution, rejected = self._try(job, pending, candidate, nodes)
            if solution is not None:
                log.durations.append((action, name, Reason.SOLVED.value, time.perf_counter() - started))
                return SearchResult(Reason.SOLVED, budget.reduced, solution.statement), solution.groups
            self._failed.add(key)
            if rejected:
                log.scenarios[action, name, "validator_rejected"] += 1
            log.durations.append((action, name, "validator_rejected" if rejected else "unsolved",
                                  time.perf_counter() - started))
        return SearchResult(Reason.GENERATORS_EXHAUSTED, budget.reduced), []

    # --- one scenario -----------------------------------------------------------------------------------

    def _try(self, job: Job, pending: list[Task], candidate: Candidate,
             nodes: set[str]) -> tuple[_Solution | None, bool]:
        """Simulate the scenario: the solution (statement not committed) or None, and whether the
        validator rejected it."""
        session = self.session
        recorded_tasks = [t for g in candidate.recorded for t in g.tasks.values()]
        added = [t for g in candidate.potential for t in g.tasks.values()]
        victims = [t for t in recorded_tasks + added if evictable(session, t)]
        if not victims:
            return None, False
        stmt = session.statement()
        self._evict(stmt, job, victims)
        here = nodes | {t.node for t in victims if t.node}
        solution, rejected = self._simulate(stmt, job, pending, candidate.recorded + candidate.potential, victims,
                                            recorded_tasks + added, here)
        if solution is None:
            stmt.discard()
        return solution, rejected

    def _evict(self, stmt: Statement, job: Job, tasks: list[Task]) -> None:
        for task, message in zip(tasks, self.messages(self.session, tasks, job)):
            stmt.evict(task, message)

    def _simulate(self, stmt: Statement, job: Job, pending: list[Task], groups: list[Job], victim_tasks: list[Task],
                  candidates: list[Task], nodes: set[str]) -> tuple[_Solution | None, bool]:
        """Place the victims again and the job's ``pending`` tasks, pipeline-only, in queue order; the
        solution, and whether the validator rejected it."""
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
                    return None, False
                placed = True
            elif room.may_fit(_to_place(session, next_job)):
                tasks = tasks_to_allocate(session, next_job, also=session.evicted, admission=False)
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
        blocked = session.disruptions.forbidding(victims + moved)
        if blocked is not None:
            self._blocked = self._blocked or blocked
            return None, True
        owners = list({t.job: session.jobs[t.job] for t in victims + moved}.values())
        scenario = Scenario(job, list(pending), candidates, victims, moved, owners)
        if self.validate is not None and not self.validate(session, scenario):
            return None, True
        return _Solution(stmt, chosen), False
