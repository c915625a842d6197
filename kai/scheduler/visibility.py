"""The visibility API: what the last scheduling cycle saw, read-only, as JSON.

:class:`Visibility` is the scheduler's cycle observer: at the end of each cycle's actions (before the
session closes) it takes a :class:`CycleView` -- references to what the session alone owns, each
pending job's pending tasks and its place in the order the scheduler tries jobs (the order the allocate
action's job queue gave them) -- and swaps it in by reference. Readers (the HTTP server's threads) only
ever see a view whose cycle has ended, so a request never waits for a cycle and a cycle never waits for
a request. The queues' shares, the nodes' amounts and the positions (in each queue and in the cluster)
are worked out on the first request for a view, each job's dominant reason (:mod:`kai.framework.reasons`)
when a request first shows the job, and kept with the view.

Routes, under :data:`PREFIX`: ``pending`` (``?queue=&offset=&limit=``), ``queues``, ``nodes``
(``?offset=&limit=``), ``explain/NAMESPACE/NAME`` (a PodGroup or one of its pods; ``?check=true``
also checks its suggestions with the kernel; in shadow mode, shadow mode's word on its pods too) and, in
shadow mode, ``shadow`` (``?outcome=&offset=&limit=``: its divergences from KAI, :mod:`kai.scheduler.shadow`).
Lists are paginated: at most :data:`MAX_LIMIT` items per request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import attrs

from kai.api import Job, Queue, Reservation, Task
from kai.common.times import rfc3339
from kai.framework import FAIR_SHARE_REASONS, Plugins, SchedulerConfig, Session, Snapshot
from kai.framework.asbuilt import maybe_pending
from kai.framework.jobqueue import JobQueue
from kai.framework.nodes import NodeInfo
from kai.framework.reasons import RESOURCES, Explainer, Reason, job_request, pending_tasks
from kai.framework.whatif import DEFAULT_BUDGET, AsBuilt, copy_as_built, keep_as_built, verify_all

if TYPE_CHECKING:
    from kai.scheduler.shadow import ShadowCommitter

PREFIX = "/apis/visibility/v1/"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: How long a check waits for a cycle to keep its snapshot, seconds.
CHECK_WAIT = 10.0
#: A snapshot kept serves the checks for this many seconds before a check asks for a new one.
COPY_INTERVAL = 30.0


@attrs.frozen
class PendingJob:
    """A pending PodGroup as the last cycle saw it; ``request`` is (CPU millicores, memory bytes, GPUs)."""

    uid: str
    namespace: str
    name: str
    queue: str
    priority: int
    creation: float
    pods: tuple[str, ...]
    request: tuple[float, float, float]
    tasks: tuple[Task, ...]
    #: The job's declared maximum runtime (seconds) and the nodes it holds, as the cycle left them.
    max_runtime: float | None = None
    reservation: Reservation | None = None


#: (position in the cluster, position in its queue, job).
Ordered = tuple[int, int, PendingJob]


class Base:
    """A cycle's snapshot kept as built (:func:`~kai.framework.whatif.keep_as_built`: nothing copied in the cycle),
    with what the counterfactuals need to run the kernel on it. The first check that uses it copies it, on its
    own thread; the later ones use that copy."""

    def __init__(self, cycle: int, kept: AsBuilt, config: SchedulerConfig, actions: tuple[str, ...],
                 taken: float) -> None:
        self.cycle, self.config, self.actions, self.taken = cycle, config, actions, taken
        #: The uids of the snapshot's jobs.
        self.jobs = kept.facts["jobs"].keys()
        self._kept: AsBuilt | None = kept
        self._copy: Snapshot | None = None
        self._lock = threading.Lock()

    def snapshot(self) -> Snapshot:
        """The copy of the snapshot as built, made on first use (then the objects kept are let go)."""
        with self._lock:
            if self._copy is None:
                assert self._kept is not None
                self._copy, self._kept = copy_as_built(self._kept), None
            return self._copy


@attrs.frozen
class QueueView:
    """A queue's amounts per resource, (CPU millicores, memory bytes, GPUs) each, -1 unlimited."""

    name: str
    parent: str | None
    priority: int
    deserved: tuple[float, ...]
    fair_share: tuple[float, ...]
    allocated: tuple[float, ...]
    requested: tuple[float, ...]
    limit: tuple[float, ...]
    over_quota_weight: tuple[float, ...]
    bounded_by: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        per = {r: {"deserved": self.deserved[i], "fair_share": self.fair_share[i], "allocated": self.allocated[i],
                   "requested": self.requested[i], "limit": self.limit[i],
                   "over_quota_weight": self.over_quota_weight[i], "bounded_by": self.bounded_by[i]}
               for i, r in enumerate(RESOURCES)}
        return {"name": self.name, "parent": self.parent, "priority": self.priority, "resources": per}


@attrs.frozen
class NodeView:
    """A node's amounts, (CPU millicores, memory bytes, GPUs) each, and its free whole and shared GPUs."""

    name: str
    node_pool: str
    allocatable: tuple[float, float, float]
    allocated: tuple[float, float, float]
    free_whole_gpus: float
    free_shared_gpus: float
    shared_gpu_groups: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "node_pool": self.node_pool,
                "allocatable": dict(zip(RESOURCES, self.allocatable, strict=True)),
                "allocated": dict(zip(RESOURCES, self.allocated, strict=True)),
                "free_whole_gpus": self.free_whole_gpus, "free_shared_gpus": round(self.free_shared_gpus, 3),
                "shared_gpu_groups": self.shared_gpu_groups}


class CycleView:
    """What one cycle saw. Taken in the cycle by reference -- the session's own node copies, fit errors and
    fair shares, which no later session changes, and each pending job with its pending tasks and rank -- and worked
    out into answers on first use, under a lock, then kept."""

    def __init__(self, session: Session, cycle: int, node_pool: str) -> None:
        self.cycle, self.time, self.node_pool = cycle, session.now, node_pool
        self._jobs = dict(session.jobs)
        self._waiting = [(job, tasks) for job in maybe_pending(session) if (tasks := pending_tasks(job))]
        self._rank = _rank(session, (job for job, _ in self._waiting))
        #: Taken now: the next session on the snapshot puts the jobs' reservations back as built.
        self._reservations = {job.uid: job.reservation for job, _ in self._waiting if job.reservation is not None}
        self._nodes = session.nodes
        self._errors = session.job_fit_errors
        proportion = session.plugins.plugin("proportion")
        self._shares: dict[str, Any] = getattr(proportion, "shares", None) or {}
        self._queues = dict(session.queues)
        self._lock = threading.Lock()
        self._pending: tuple[PendingJob, ...] | None = None
        self._ordered: tuple[list[Ordered], dict[str, list[int]]] | None = None
        self._queue_views: dict[str, QueueView] | None = None
        self._node_views: tuple[NodeView, ...] | None = None
        self._explainer: Explainer | None = None
        self._reasons: dict[str, Reason] = {}

    @property
    def pending(self) -> tuple[PendingJob, ...]:
        with self._lock:
            if self._pending is None:
                self._pending = tuple(
                    PendingJob(job.uid, job.namespace, job.name, job.queue, job.priority, job.creation,
                               tuple(t.name for t in tasks), job_request(tasks), tasks, job.max_runtime,
                               self._reservations.get(job.uid))
                    for job, tasks in self._waiting)
            return self._pending

    @property
    def queues(self) -> dict[str, QueueView]:
        with self._lock:
            if self._queue_views is None:
                self._queue_views = _queues(self._queues, self._shares)
            return self._queue_views

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        with self._lock:
            if self._node_views is None:
                self._node_views = _nodes(self._nodes, self.node_pool)
            return self._node_views

    def reason(self, job: PendingJob) -> Reason:
        """The job's dominant reason, worked out on first use."""
        with self._lock:
            found = self._reasons.get(job.uid)
            if found is None:
                if self._explainer is None:
                    self._explainer = Explainer(self._nodes, self._jobs, self._errors, self.node_pool)
                found = self._reasons[job.uid] = self._explainer.reason(self._jobs[job.uid], job.tasks)
            return found

    def ordered(self) -> tuple[list[Ordered], dict[str, list[int]]]:
        """(position in the cluster, position in its queue, job) in cluster order, and per queue the indexes
        of its jobs in that list."""
        pending = self.pending
        with self._lock:
            if self._ordered is None:
                self._ordered = _order(pending, self._rank)
            return self._ordered

    def find(self, namespace: str, name: str) -> Ordered | None:
        """The pending PodGroup ``namespace/name``, or the one with a pod of that name."""
        for entry in self.ordered()[0]:
            job = entry[2]
            if job.namespace == namespace and (job.name == name or name in job.pods):
                return entry
        return None


def _order(pending: Iterable[PendingJob], rank: dict[str, int]) -> tuple[list[Ordered], dict[str, list[int]]]:
    """``pending`` in the order of ``rank`` (job uid -> its place in the order the scheduler tries jobs)."""
    out: list[Ordered] = []
    index: dict[str, list[int]] = {}
    for job in sorted(pending, key=lambda j: rank[j.uid]):
        mine = index.setdefault(job.queue, [])
        mine.append(len(out))
        out.append((len(out) + 1, len(mine), job))
    return out, index


def _rank(session: Session, waiting: Iterable[Job]) -> dict[str, int]:
    """Each waiting job's place in the order the scheduler tries them: the allocate action's, as its job queue gave
    them (a job tried again counts where it was last tried), then the jobs it did not try (not ready, beyond its
    queue depth, or no allocate action) in the order a :class:`~kai.framework.jobqueue.JobQueue` of the session
    gives them."""
    rank = {job.uid: i for i, job in enumerate(session.allocation_order)}
    rest = [job for job in waiting if job.uid not in rank]
    if rest:
        queue, tried = JobQueue(session, rest), len(session.allocation_order)
        while (job := queue.pop()) is not None:
            rank[job.uid] = tried
            tried += 1
    return rank


def build_view(session: Session, cycle: int = 0, node_pool: str = "default") -> CycleView:
    """The view of an open ``session`` after its actions."""
    return CycleView(session, cycle, node_pool)


def _queues(queues: dict[str, Queue], shares: dict[str, Any]) -> dict[str, QueueView]:
    out = {}
    for name, q in queues.items():
        s = shares.get(name)
        if s is None:
            specs = (q.cpu, q.memory, q.gpu)
            none = (0.0, 0.0, 0.0)
            out[name] = QueueView(name, q.parent, q.priority, tuple(x.deserved for x in specs), none, none, none,
                                  tuple(x.limit for x in specs), tuple(x.over_quota_weight for x in specs),
                                  ("", "", ""))
        else:
            out[name] = QueueView(name, s.parent, s.priority, tuple(s.deserved), tuple(s.fair_share),
                                  tuple(s.allocated), tuple(s.request), tuple(s.limit), tuple(s.weight),
                                  tuple(FAIR_SHARE_REASONS[r] for r in s.reason))
    return out


def _nodes(nodes: list[NodeInfo], node_pool: str) -> tuple[NodeView, ...]:
    out = []
    for n in nodes:
        alloc, idle = n.allocatable, n.idle
        shared = n.idle_gpu_sum() - idle.gpu
        out.append(NodeView(n.name, node_pool, (alloc.cpu, alloc.memory, alloc.gpu),
                            (alloc.cpu - idle.cpu, alloc.memory - idle.memory, alloc.gpu - idle.gpu),
                            idle.gpu, shared, len(n.gpu_groups)))
    return tuple(out)


class Visibility:
    """The scheduler's cycle observer and the API's answers; ``view`` is the last cycle's (None before one).

    A check of the suggestions (``explain/...?check=true``) sets :attr:`copy_wanted` when the last
    :class:`Base` is older than :data:`COPY_INTERVAL`; the next cycle then also keeps its snapshot as built
    (:func:`~kai.framework.whatif.keep_as_built`, on the scheduling thread: a tuple per task and job, only when
    asked and at most once an interval, and no copy), and the request copies it and runs the kernel on copies
    of that copy on its own thread, with plugins of its own."""

    def __init__(self, node_pool: str = "default", actions: Sequence[str] | None = None) -> None:
        self.node_pool = node_pool
        #: The actions the counterfactuals run (default: the session's configured ones).
        self.actions = actions
        self.view: CycleView | None = None
        self.copy_wanted = threading.Event()
        #: The last snapshot kept for the checks.
        self.base: Base | None = None
        #: In shadow mode, its committer: its divergences from KAI are listed, and ``explain`` has its word.
        self.shadow: ShadowCommitter | None = None
        self._cycles = 0
        self._changed = threading.Condition()

    def __call__(self, session: Session) -> None:
        self._cycles += 1
        view = build_view(session, self._cycles, self.node_pool)
        base = self.base
        if self.copy_wanted.is_set():
            self.copy_wanted.clear()
            config = session.plugins.config
            base = Base(self._cycles, keep_as_built(session.snapshot), config,
                        tuple(self.actions if self.actions is not None else config.actions), time.monotonic())
        with self._changed:
            self.view, self.base = view, base
            self._changed.notify_all()

    def explain(self, namespace: str, name: str, check: bool = False, budget: float = DEFAULT_BUDGET,
                wait: float = CHECK_WAIT) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) of ``namespace/name`` in the last view; with ``check`` its suggestions
        checked on a copy of the last snapshot kept (a new one asked for and waited for, at most ``wait`` seconds,
        when that one is older than :data:`COPY_INTERVAL` or predates the job)."""
        view, base = self.view, self.base
        found = view.find(namespace, name) if view is not None else None
        if check and (base is None or time.monotonic() - base.taken > COPY_INTERVAL
                      or (found is not None and found[2].uid not in base.jobs)):
            self.copy_wanted.set()
            with self._changed:
                self._changed.wait_for(lambda: self.base is not base, wait)
            view, base = self.view, self.base
            found = view.find(namespace, name) if view is not None else None
        if view is None:
            return 503, {"error": "no scheduling cycle has run yet"}
        head: dict[str, Any] = {"cycle": view.cycle, "time": view.time, "node_pool": view.node_pool}
        if found is None:
            return 404, head | {"error": f"{namespace}/{name} is not pending in the last cycle"}
        answer = head | pending_json(found, view)
        if check and base is not None:
            answer["checked_on_cycle"] = base.cycle
            checkable = [w for w in answer["reason"]["would_run_if"] if w["change"] is not None]
            verdicts = verify_all(base.snapshot(), Plugins(base.config), found[2].uid,
                                  [w["change"] for w in checkable], base.actions, budget)
            for hint, verdict in zip(checkable, verdicts, strict=True):
                hint["verified"] = verdict
        return 200, answer

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) of a GET of ``path`` (with its query) under :data:`PREFIX`."""
        route, _, query = path.partition("?")
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        view = self.view
        if view is None:
            return 503, {"error": "no scheduling cycle has run yet"}
        try:
            offset = max(int(params.get("offset", 0)), 0)
            limit = min(max(int(params.get("limit", DEFAULT_LIMIT)), 0), MAX_LIMIT)
        except ValueError:
            return 400, {"error": "offset and limit must be integers"}
        parts = route[len(PREFIX):].strip("/").split("/")
        head = {"cycle": view.cycle, "time": view.time, "node_pool": view.node_pool}
        if parts == ["pending"]:
            ordered, index = view.ordered()
            queue = params.get("queue")
            rows = [ordered[i] for i in index.get(queue, [])] if queue else ordered
            return 200, head | {"total": len(rows), "offset": offset,
                                "items": [pending_json(e, view) for e in rows[offset:offset + limit]]}
        if parts == ["queues"]:
            return 200, head | {"items": [q.to_json() for q in view.queues.values()]}
        if parts == ["nodes"]:
            return 200, head | {"total": len(view.nodes), "offset": offset,
                                "items": [n.to_json() for n in view.nodes[offset:offset + limit]]}
        if parts == ["shadow"] and self.shadow is not None:
            return 200, head | self.shadow.entries(offset, limit, params.get("outcome"))
        if len(parts) == 3 and parts[0] == "explain":
            status, body = self.explain(parts[1], parts[2], check=params.get("check") == "true")
            if self.shadow is not None:
                body["shadow"] = self.shadow.about(parts[1], parts[2])
            return status, body
        return 404, {"error": f"unknown route {route}"}


def pending_json(entry: Ordered, view: CycleView) -> dict[str, Any]:
    cluster, in_queue, job = entry
    return {"namespace": job.namespace, "name": job.name, "uid": job.uid, "queue": job.queue,
            "priority": job.priority, "position_in_cluster": cluster, "position_in_queue": in_queue,
            "pods": list(job.pods), "requested": dict(zip(RESOURCES, job.request, strict=True)),
            "age_seconds": round(max(view.time - job.creation, 0.0), 3), "reason": view.reason(job).to_json(),
            "max_runtime_seconds": job.max_runtime, "reservation": _reservation_json(job.reservation, view.time)}


def _reservation_json(held: Reservation | None, now: float) -> dict[str, Any] | None:
    """The nodes a pending job holds, until when, and when it is expected to fit (RFC 3339; null: not known)."""
    if held is None or not held.active(now):
        return None
    return {"nodes": list(held.nodes), "since": rfc3339(held.since), "until": rfc3339(held.until),
            "expected_start": None if held.start is None else rfc3339(held.start)}
