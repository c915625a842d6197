"""Session: one scheduling cycle over a Snapshot.

The session holds the per-cycle state (node amounts, task placements, fit errors, decisions),
calls the plugins through per-session call lists, and offers actions the primitives they share:
orderings, node selection for a task (done by :mod:`kai.framework.nodeselect`), statements. Live,
simulated and test runs all use it.

Faults are contained (:mod:`kai.framework.faults`): an exception in one job's step is rolled back and
recorded in :attr:`Session.errors`, one outside any step ends its action only, and one in a plugin's
``kai_session_close`` is recorded while the other plugins still close; a plugin failing to open the
session raises :class:`~kai.framework.faults.SessionOpenError`. A node whose bound pods ask more than it
has (its allocatable shrank) is reported as a problem and takes no new pod until it has room.
"""

from __future__ import annotations

import functools
import logging
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from kai.api import (
    ACTIVE_USED,
    EPSILON,
    Job,
    Member,
    PodSet,
    Queue,
    QueueDetails,
    Reject,
    SubGroup,
    Task,
    TaskStatus,
)
from kai.framework import fiterrors, gpusharing
from kai.framework.disruption import Disruptions
from kai.framework.faults import INTERNAL_ERROR_REASON, Contained, SchedulingError, SessionOpenError, describe
from kai.framework.fiterrors import PLAIN_FIT_ERROR_REASON
from kai.framework.journal import Journal
from kai.framework.nodeclasses import NodeClasses
from kai.framework.nodes import NodeArrays, NodeInfo, place_tasks
from kai.framework.nodeselect import Choice, NodeSelector
from kai.framework.plugins import Plugins
from kai.framework.scenariosearch import SearchLog
from kai.framework.snapshot import NODE_OVERCOMMITTED, Problem, Snapshot
from kai.framework.statement import Decision, Statement

log = logging.getLogger("kai.session")
if TYPE_CHECKING:
    from kai.framework.reservation import Reservations

    #: What the fallback orders compare: (creation time, name) or the name alone, names as bytes.
    _Key = TypeVar("_Key", tuple[float, bytes], bytes)


def _fallback(a_key: _Key, b_key: _Key) -> int:
    return (a_key > b_key) - (a_key < b_key)


def _name_key(name: str) -> bytes:
    return name.encode()


class Session:
    """State and services of one scheduling cycle."""

    def __init__(self, snapshot: Snapshot, plugins: Plugins) -> None:
        self.snapshot = snapshot
        self.plugins = plugins
        self.now = snapshot.now
        self.jobs: dict[str, Job] = snapshot.jobs
        self.queues: dict[str, Queue] = snapshot.queues
        self.children: dict[str | None, list[Queue]] = {}
        #: Each queue's position among its parent's children.
        self.sibling_slots: dict[str, int] = {}
        for q in self.queues.values():
            siblings = self.children.setdefault(q.parent, [])
            self.sibling_slots[q.name] = len(siblings)
            siblings.append(q)
        #: The queues of the jobs whose tasks moved, in order (a queue moved twice in a row is listed once):
        #: what a :class:`~kai.framework.jobqueue.JobQueue` reads to know which queues to compare again.
        self.queue_moves: list[str] = []
        #: Bumped when every queue's standing may have changed (a job arrived): job queues order afresh.
        self.order_epoch = 0
        #: Each queue's chain up to the root (:meth:`ancestors`), worked out on first use.
        self._chains: dict[str, list[Queue]] = {}
        reused = snapshot.journal is not None
        snapshot.rewind()
        #: What this session changes on the snapshot's tasks and jobs, put back by the next session on it.
        self.journal = snapshot.journal = Journal(len(snapshot.problems))
        self.arrays, self.nodes = self._place_tasks(snapshot, reused)
        #: Nodes by name; looking up the node of an unplaced task (None) finds none.
        self.node_by_name: dict[str | None, NodeInfo] = {n.name: n for n in self.nodes}
        self.all_candidates = array("i", range(len(self.nodes)))
        self.calls = plugins.call_lists()
        self.hook = plugins.pm.hook
        #: Why each job could not be placed: job uid -> its errors.
        self.job_fit_errors: dict[str, list[fiterrors.JobFitError]] = {}
        #: Why a task found no node: task uid -> message.
        self.task_fit_errors: dict[str, str] = {}
        #: Whether a task that finds no node gets KAI's reasons, worked out over every node; a driver that
        #: reports no fit errors (trace replay) turns it off and such a task gets no message.
        self.explain = True
        self.decisions: list[Decision] = []
        #: The jobs the allocate action took from its job queue, in the order it tried them (a job stepped
        #: again is listed again): what the visibility API serves as the order of the pending jobs.
        self.allocation_order: list[Job] = []
        #: Uids of the tasks evicted in this session (virtually Releasing): the eviction actions' simulations
        #: may place them again, and the queue order counts them in their job's next step.
        self.evicted: set[str] = set()
        #: Exceptions contained in this session (a job's step, an action, a plugin's close), in order.
        self.errors: list[SchedulingError] = []
        #: Seconds each plugin's ``kai_session_open`` / ``kai_session_close`` took, by (plugin, hook name).
        self.plugin_seconds: dict[tuple[str, str], float] = {}
        #: The disruptions each PodDisruptionBudget still allows in this session.
        self.disruptions = Disruptions(snapshot.budgets)
        #: What the eviction actions' bounded victim searches did (for the metrics).
        self.scenario_search = SearchLog()
        #: Statements with operations not committed or discarded yet, oldest first.
        self.open_statements: list[Statement] = []
        #: Positions of the nodes short of an extended resource (MIG profile ...) when the session opened.
        self.short_scalars: set[int] = set()
        self._report_overcommitted()
        #: The nodes waiting gangs hold (:func:`kai.framework.reservation.reservations`), worked out on first use.
        self.reservations: Reservations | None = None
        #: Node selection for a task (:mod:`kai.framework.nodeselect`).
        self.selector = NodeSelector(self)
        self.job_key = functools.cmp_to_key(self.compare_jobs)
        self.task_key = functools.cmp_to_key(self.compare_tasks)

    @staticmethod
    def _place_tasks(snapshot: Snapshot, reused: bool) -> tuple[NodeArrays, list[NodeInfo]]:
        """The node amounts and views with the snapshot's placed tasks on them: worked out by the sessions on a
        snapshot until one finds it reused or the snapshot is to keep them (:meth:`Snapshot.follow`), which keeps
        them for the next ones (the snapshot is rewound to the same state in between) and works on a copy; the
        accounting of the snapshot before is brought up to date where it can be (:func:`place_tasks`)."""
        if snapshot.placed is None:
            changes = None if snapshot.changed is None else (snapshot.changed | snapshot.gone, snapshot.replaced)
            before, snapshot.before = snapshot.before, None  # handed over: a failure below starts afresh next time
            arrays, nodes = place_tasks(snapshot.nodes, snapshot.jobs, before, changes, snapshot.in_order)
            if not (reused or snapshot.followed):
                return arrays, nodes
            snapshot.placed = (arrays, nodes)
        arrays, nodes = snapshot.placed
        copy = arrays.copy()
        return copy, [n.copy(copy) for n in nodes]

    def _report_overcommitted(self) -> None:
        """A problem for every node whose placed pods ask more than it has; the fit checks keep new pods off
        it (every amount must be covered) until it has room."""
        a = self.arrays
        over = {i for amounts in (a.idle_cpu, a.idle_mem, a.idle_gpu, a.idle_pods)
                if min(amounts, default=0.0) < -EPSILON  # as a rule none is: not gone over one by one
                for i, idle in enumerate(amounts) if idle < -EPSILON}
        if any(a.idle_scalars):
            over.update(i for i, scalars in enumerate(a.idle_scalars) if scalars)
        for i in sorted(over):
            n = self.nodes[i]
            short = [f"{name} {total - idle:g} of {total:g}" for name, idle, total in (
                ("CPU (millicores)", a.idle_cpu[i], a.alloc_cpu[i]), ("memory (bytes)", a.idle_mem[i], a.alloc_mem[i]),
                ("GPUs", a.idle_gpu[i], a.alloc_gpu[i]), ("pods", a.idle_pods[i], float(n.node.max_pods)))
                if idle < -EPSILON]
            scalars = [k for k, v in a.idle_scalars[i].items() if v < -EPSILON]
            if scalars:
                self.short_scalars.add(i)
                short.extend(f"{k} {n.allocatable.scalars.get(k, 0.0) - a.idle_scalars[i][k]:g} of "
                             f"{n.allocatable.scalars.get(k, 0.0):g}" for k in scalars)
            if short:
                self.snapshot.problems.append(Problem(
                    "node", n.name, NODE_OVERCOMMITTED,
                    f"the pods placed on the node ask more than it has ({', '.join(short)}); "
                    "no new pod is placed on it until it has room"))

    # --- life cycle -------------------------------------------------------------------------------

    def open(self) -> Session:
        """Open every plugin's session state, in configuration order. A plugin that raises makes the cycle
        unsafe to schedule: the plugins opened so far are closed again and :class:`SessionOpenError` names it."""
        opened: list[str] = []
        for name, fn in self.plugins.implementations("kai_session_open"):
            started = time.perf_counter()
            try:
                fn(self)
            except Exception as exc:
                self._close_plugins(opened)
                raise SessionOpenError(f"plugin {name!r} failed to open the session ({describe(exc)}); "
                                       "the cycle is skipped") from exc
            self.plugin_seconds[name, "kai_session_open"] = time.perf_counter() - started
            opened.append(name)
        return self

    def run_actions(self, actions: Iterable[str] | None = None) -> None:
        """Run the configured actions (or ``actions``) in order; an exception outside a job's step ends
        its action only (recorded in :attr:`errors`)."""
        for name in self.plugins.config.actions if actions is None else actions:
            log.debug("action %s starts", name)
            with Contained(self, name, None):
                self.plugins.actions[name](self)

    def add_job(self, job: Job) -> list[Reject]:
        """Let a job with pending tasks arrive in this open session: it joins :attr:`jobs` and every plugin
        updates its state through ``kai_session_job_added``. Returns the plugins' vetoes; when there is one the
        job is taken out again and only a new session can schedule it. A replay adds each arrival this way
        instead of opening a session per arrival."""
        if job.uid in self.jobs:
            raise ValueError(f"job {job.name} is already in the session")
        if job.queue not in self.queues or any(t.status is not TaskStatus.PENDING for t in job.tasks.values()):
            raise ValueError(f"job {job.name}: an arriving job needs a known queue and pending tasks only")
        self.jobs[job.uid] = job
        self.journal.added_jobs.append(job.uid)
        vetoes = [r for r in self.hook.kai_session_job_added(session=self, job=job) if r is not None]
        self.order_epoch += 1
        if vetoes:
            del self.jobs[job.uid]
        return vetoes

    def close(self) -> None:
        """Close every plugin's session state; one that raises is recorded in :attr:`errors`, the others
        still close, and the decisions stand."""
        self._close_plugins(None)

    def _close_plugins(self, only: list[str] | None) -> None:
        for name, fn in self.plugins.implementations("kai_session_close"):
            if only is not None and name not in only:
                continue
            started = time.perf_counter()
            try:
                fn(self)
            except Exception as exc:  # noqa: BLE001 - the decisions are made; closing frees plugin state
                self.errors.append(SchedulingError.of(exc, "session close", plugin=name))
                log.error("plugin %s failed to close the session: %s", name, describe(exc), exc_info=exc)
            self.plugin_seconds[name, "kai_session_close"] = time.perf_counter() - started

    # --- faults -------------------------------------------------------------------------------------

    def contained(self, action: str, job: Job) -> Contained:
        """The context of one job's step in ``action``: ``with session.contained(action, job): ...`` rolls
        the step back and records the error when it raises (:mod:`kai.framework.faults`)."""
        return Contained(self, action, job)

    def contain(self, exc: Exception, action: str, job: Job | None, mark: int = 0) -> None:
        """Handle an exception of ``action`` (in ``job``'s step, when given): discard the statements opened
        since ``mark`` (newest first), log and record it, and give the job an internal-error fit error."""
        undo_errors: list[Exception] = []
        for stmt in reversed(self.open_statements[mark:]):
            undo_errors.extend(stmt.abandon())
        error = SchedulingError.of(exc, action, job)
        self.errors.append(error)
        if job is None:
            log.error("action %s failed and was ended; the next action goes on: %s", action, error.message,
                      exc_info=exc)
        else:
            log.error("internal error in action %s while scheduling podgroup %s of queue %s; the podgroup is "
                      "skipped in this action: %s", action, job.uid, job.queue, error.message, exc_info=exc)
            self.add_job_fit_error(job, error.fit_error(), reason=INTERNAL_ERROR_REASON)
        for undo in undo_errors:
            log.error("action %s: a plugin raised while the allocation events of a failed step were undone: %s",
                      action, describe(undo), exc_info=undo)

    def statement(self) -> Statement:
        return Statement(self)

    def record(self, decisions: list[Decision]) -> None:
        self.decisions.extend(decisions)
        self.disruptions.spend(d.task for d in decisions if d.kind == "evict")
        for d in decisions:
            log.info("%s %s on node %s", d.kind, d.task.uid, d.node)
            if d.kind == "evict" and (job := self.jobs.get(d.task.job)) is not None:
                self.journal.job(job)
                job.last_eviction = self.now

    def withdraw(self, task: Task) -> None:
        """Drop the committed pipeline decision of ``task`` (a later statement took its reservation back)."""
        self.decisions = [d for d in self.decisions if not (d.kind == "pipeline" and d.task is task)]

    # --- queue tree ---------------------------------------------------------------------------------

    def ancestors(self, queue_name: str) -> list[Queue]:
        """The queue and its ancestors, leaf first (a new list each call; the chain is worked out once)."""
        chain = self._chains.get(queue_name)
        if chain is None:
            chain, q = [], self.queues.get(queue_name)
            while q is not None:
                chain.append(q)
                q = self.queues.get(q.parent) if q.parent else None
            self._chains[queue_name] = chain
        return list(chain)

    # --- task placement (used by statements) --------------------------------------------------------

    def keep(self, task: Task) -> None:
        """Journal ``task`` and its job before the session changes them (see :mod:`kai.framework.journal`)."""
        self.journal.task(task)
        if (job := self.jobs.get(task.job)) is not None:
            self.journal.job(job)

    def move_task(self, task: Task, status: TaskStatus, node: str | None,
                  gpu_groups: tuple[str, ...] | None = None) -> None:
        """Set a task's status and node (and its shared GPU groups, when given), keeping node amounts and
        plugin state current."""
        if id(task) not in self.journal.tasks:
            self.keep(task)
        if (job := self.jobs.get(task.job)) is not None and (not self.queue_moves or self.queue_moves[-1] != job.queue):
            self.queue_moves.append(job.queue)
        old = self.node_by_name.get(task.node) if task.status in ACTIVE_USED else None
        was_placed = task.status in ACTIVE_USED and task.status is not TaskStatus.RELEASING
        if old is not None:
            old.remove_task(task)
        task.status, task.node = status, node
        if gpu_groups is not None:
            task.gpu_groups = gpu_groups
        new = self.node_by_name.get(node) if status in ACTIVE_USED else None
        if new is not None:
            new.add_task(task)
        placed = status in ACTIVE_USED and status is not TaskStatus.RELEASING
        if was_placed and not placed:
            for fn in self.calls.kai_on_deallocate:
                fn(self, task, old)
        elif placed and not was_placed:
            for fn in self.calls.kai_on_allocate:
                fn(self, task, new)

    # --- orderings ----------------------------------------------------------------------------------

    def compare_jobs(self, a: Job, b: Job) -> int:
        for fn in self.calls.kai_job_order:
            r = fn(self, a, b)
            if r:
                return r
        return _fallback((a.creation, _name_key(a.name)), (b.creation, _name_key(b.name)))

    def compare_tasks(self, a: Task, b: Task) -> int:
        for fn in self.calls.kai_task_order:
            r = fn(self, a, b)
            if r:
                return r
        return _fallback((a.creation, _name_key(a.name)), (b.creation, _name_key(b.name)))

    def compare_members(self, job: Job, a: Member, b: Member) -> int:
        for fn in self.calls.kai_subgroup_order:
            r = fn(self, job, a, b)
            if r:
                return r
        return _fallback(_name_key(a.name), _name_key(b.name))

    def compare_queues(self, a: Queue, b: Queue, a_job: Job | None, b_job: Job | None,
                       a_victims: Sequence[Job] = (), b_victims: Sequence[Job] = ()) -> int:
        for fn in self.calls.kai_queue_order:
            r = fn(self, a, b, a_job, b_job, a_victims, b_victims)
            if r:
                return r
        return _fallback((a.creation, _name_key(a.name)), (b.creation, _name_key(b.name)))

    # --- filters ------------------------------------------------------------------------------------

    def job_over_capacity(self, job: Job, tasks: list[Task]) -> Reject | None:
        for fn in self.calls.kai_job_over_capacity:
            r = fn(self, job, tasks)
            if r is not None:
                return r
        return None

    def task_over_capacity(self, task: Task, job: Job, node: NodeInfo | None) -> Reject | None:
        for fn in self.calls.kai_task_over_capacity:
            r = fn(self, task, job, node)
            if r is not None:
                return r
        return None

    def pre_predicate(self, task: Task, job: Job) -> Reject | str | None:
        if task.invalid:
            return task.invalid
        for fn in self.calls.kai_pre_predicate:
            r = fn(self, task, job)
            if r is not None:
                return r
        return None

    # --- node subsets -------------------------------------------------------------------------------

    def pre_job_allocation(self, job: Job) -> None:
        for fn in self.calls.kai_pre_job_allocation:
            fn(self, job)

    def subset_nodes(self, job: Job, group: SubGroup | PodSet, pod_sets: list[str], tasks: list[Task],
                     nodes: list[NodeInfo]) -> list[list[NodeInfo]]:
        """The node sets to try ``group``'s tasks on, in order: each plugin splits every set of the ones before."""
        sets = [nodes]
        for fn in self.calls.kai_subset_nodes:
            split: list[list[NodeInfo]] = []
            for node_set in sets:
                r = fn(self, job, group, pod_sets, tasks, node_set)
                split.extend([node_set] if r is None else r)
            sets = split
        return sets

    # --- node selection (kai.framework.nodeselect) ---------------------------------------------------

    def fit_mask(self, task: Task, candidates: array[int]) -> array[int]:
        """Per candidate node position: 0 when ``task`` does not fit idle + releasing resources, else 2 when it
        fits the idle resources too, else 1."""
        return self.selector.fit_mask(task, candidates)

    def feasible_nodes(self, task: Task, job: Job, candidates: array[int] | None = None,
                       reasons: Counter[str] | None = None) -> list[Choice]:
        """Nodes where ``task`` fits and no predicate vetoes (:meth:`NodeSelector.feasible_nodes`)."""
        return self.selector.feasible_nodes(task, job, candidates, reasons)

    def ordered_nodes(self, task: Task, job: Job, candidates: array[int] | None = None,
                      reasons: Counter[str] | None = None) -> list[Choice]:
        """Feasible nodes of ``task`` from best to worst (:meth:`NodeSelector.ordered_nodes`)."""
        return self.selector.ordered_nodes(task, job, candidates, reasons)

    def node_choices(self, task: Task, job: Job, candidates: array[int] | None = None,
                     reasons: Counter[str] | None = None) -> Iterator[Choice]:
        """The nodes of :meth:`ordered_nodes`, worked out as asked for (:meth:`NodeSelector.node_choices`)."""
        return self.selector.node_choices(task, job, candidates, reasons)

    @property
    def node_classes(self) -> NodeClasses:
        """The session's node classes, built on the first placement that uses them."""
        return self.selector.node_classes

    def insufficient(self, node: NodeInfo, task: Task) -> list[str]:
        """KAI's short reasons why ``task`` does not fit ``node``'s idle + releasing resources."""
        return self.selector.insufficient(node, task)

    def choose_gpu_groups(self, task: Task, node: NodeInfo, fits_idle: bool,
                          pipeline_only: bool) -> tuple[tuple[str, ...], bool] | None:
        """``(group ids, pipelined)`` for a shared-GPU task on ``node`` (see :func:`gpusharing.choose_devices`)."""
        return gpusharing.choose_devices(self, task, node, fits_idle, pipeline_only)

    # --- explanations -------------------------------------------------------------------------------

    def add_job_fit_error(self, job: Job, message: str | list[str], detail: str | None = None,
                          reason: str = PLAIN_FIT_ERROR_REASON, details: QueueDetails | None = None) -> None:
        """Record one reason ``job`` was not placed: its short message(s), counted per message in
        :meth:`job_fit_message`, for :meth:`job_fit_detail` its ``reason`` (KAI's unschedulable reason) and
        ``detail`` (default: the messages joined), and structured ``details`` for the PodGroup's condition."""
        messages = (message,) if isinstance(message, str) else tuple(message)
        self.job_fit_errors.setdefault(job.uid, []).append(
            fiterrors.JobFitError(reason, messages, ", ".join(messages) if detail is None else detail, details))

    def add_veto_fit_error(self, job: Job, veto: Reject) -> None:
        """Record a veto as one reason ``job`` was not placed (a queue-capacity veto with its reason and queue)."""
        self.add_job_fit_error(job, veto.reason, reason=veto.kind or PLAIN_FIT_ERROR_REASON, details=veto.details)

    def set_task_fit_error(self, task: Task, reasons: Counter[str]) -> str:
        """Record KAI's per-pod message for a task that found no node, and return it."""
        msg = self.task_fit_errors[task.uid] = fiterrors.task_fit_message(reasons)
        return msg

    def job_fit_detail(self, job: Job) -> str:
        """KAI's detailed job-level message (see :func:`kai.framework.fiterrors.job_fit_detail`)."""
        return fiterrors.job_fit_detail(self.job_fit_errors.get(job.uid, []))

    def job_fit_message(self, job: Job) -> str:
        """KAI's job-level message (see :func:`kai.framework.fiterrors.job_fit_message`)."""
        return fiterrors.job_fit_message(self.job_fit_errors.get(job.uid, []))
