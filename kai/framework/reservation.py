"""Reservations: a large gang that cannot start holds the nodes it needs as they free up; short jobs backfill.

A gang the allocate action cannot place, which the policy lets reserve (``reservation`` in the configuration:
its queue, its priority, at least ``minGPUs`` pending GPUs), picks nodes that could host its tasks -- those
expected to free first, then those with the most idle GPUs -- until they have room for every pending task, within
``maxGPUs`` for all reservations together. The reservation is the job's (:attr:`Job.reservation
<kai.api.Job.reservation>`): the nodes, since when, until when (``maxDuration`` later) and its expected start,
the first time the nodes have room for every pending task, counted from the declared maximum runtimes of the
jobs on them (:attr:`Job.max_runtime <kai.api.Job.max_runtime>`; None while one of them declares none). Every
cycle each holder, higher priority and older first, chooses its nodes again the same way, so that it holds those
expected to free first as the cluster changes; since and until stay.

While the reservation holds, other jobs are placed on its nodes only when they backfill: they declare a maximum
runtime and end before the expected start. That holds for every placement the actions make, the eviction
actions' preemptors and the victims they move too (evicting pods on reserved nodes is not held back). A
reservation is released when its gang is placed, leaves or the policy is off; when it expires, the gang's next
failed attempt reserves again, the nodes chosen afresh.

A driver keeps the reservation with the job between cycles (live: the PodGroup's ``kai.scheduler/reservation``
annotation), so a restarted scheduler finds it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from kai.api import ACTIVE_ALLOCATED, Job, Reservation, Task, TaskStatus, names
from kai.common.durations import parse_duration
from kai.common.times import rfc3339
from kai.common.yamlfile import Fields
from kai.framework.asbuilt import JobsKey, changed_jobs, flagged_as_built

if TYPE_CHECKING:
    from kai.framework.nodes import NodeInfo
    from kai.framework.session import Session

#: The snapshot memo of the jobs that hold a reservation as built.
MEMO = JobsKey("reservation")
FIELDS = ("enabled", "queues", "minPriority", "minGPUs", "maxGPUs", "maxDuration")


@attrs.frozen
class ReservationPolicy:
    """Which gangs may reserve nodes, how many GPUs all reservations hold at most, and for how long."""

    #: Off by default: no job reserves and reservations found on jobs are released.
    enabled: bool = False
    #: Leaf queues whose jobs may reserve; empty: every queue.
    queues: tuple[str, ...] = ()
    #: Only jobs of at least this priority reserve; None: any priority.
    min_priority: int | None = None
    #: Only jobs with at least this many pending GPUs reserve.
    min_gpus: float = 16.0
    #: Most GPUs (of the reserved nodes) all reservations hold together; negative: no limit.
    max_gpus: float = -1.0
    #: How long (seconds) a reservation holds.
    duration: float = 3600.0

    def may_reserve(self, job: Job, gpus: float) -> bool:
        return (self.enabled and gpus >= self.min_gpus and (not self.queues or job.queue in self.queues)
                and (self.min_priority is None or job.priority >= self.min_priority))


def parse_reservation_policy(data: Any, where: str) -> ReservationPolicy:
    """The configuration's ``reservation`` mapping (None: the defaults, off); ConfigError names the field."""
    if data is None:
        return ReservationPolicy()
    f = Fields(data, f"{where}: reservation", FIELDS)
    default = ReservationPolicy()
    duration = default.duration
    if f.has("maxDuration"):
        try:
            duration = parse_duration(f.data["maxDuration"], "maxDuration")
        except ValueError as exc:
            raise f.fail("maxDuration", f"is not a duration: {exc}") from None
        if duration <= 0:
            raise f.fail("maxDuration", "must be positive")
    priority = f.whole("minPriority", None)
    return ReservationPolicy(f.flag("enabled", default.enabled), tuple(f.names("queues")), priority,
                             float(f.number("minGPUs", default.min_gpus, 0.0)),
                             float(f.number("maxGPUs", default.max_gpus, -1.0)), duration)


class Reservations:
    """The reservations of one session: which job holds each node, as allocate sees them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.policy: ReservationPolicy = session.plugins.config.reservation
        #: Node name -> the job whose active reservation holds it.
        self.holder: dict[str, Job] = {}
        touched = changed_jobs(session)
        held = flagged_as_built(session, MEMO, lambda j: j.reservation is not None, touched)
        active: list[Job] = []
        for uid in sorted(held | {u for u in touched if u in session.jobs}):
            job = session.jobs.get(uid)
            if job is None or job.reservation is None:
                continue
            if not self.policy.enabled or not waiting(job):
                self._set(job, None)
            elif job.reservation.active(session.now):
                active.append(job)
        # every cycle each holder, higher priority and older first, takes the nodes that free first now
        for job in sorted(active, key=lambda j: (-j.priority, j.creation, j.uid)):
            assert job.reservation is not None
            nodes = self._choose(job) or tuple(
                n for n in job.reservation.nodes if n in session.node_by_name and n not in self.holder)
            self._hold(job, attrs.evolve(job.reservation, nodes=nodes, start=self.expected_start(job, nodes)))

    def _hold(self, job: Job, reservation: Reservation) -> None:
        self._set(job, reservation)
        for name in reservation.nodes:
            self.holder[name] = job

    def _set(self, job: Job, reservation: Reservation | None) -> None:
        if reservation != job.reservation:
            self.session.journal.job(job)
            job.reservation = reservation

    def closed_to(self, job: Job) -> set[int]:
        """Positions of the nodes held for other jobs that ``job`` may not backfill."""
        if not self.holder:
            return set()
        now, node_by_name = self.session.now, self.session.node_by_name
        closed = set()
        for name, owner in self.holder.items():
            if owner is job:
                continue
            start = owner.reservation.start if owner.reservation is not None else None
            if job.max_runtime is None or start is None or now + job.max_runtime > start:
                closed.add(node_by_name[name].index)
        return closed

    def expected_start(self, job: Job, nodes: tuple[str, ...]) -> float | None:
        """The first time ``nodes`` have room for every pending task of ``job`` (each as large as its largest), from
        the declared runtimes of the jobs on them (now when they have room already); None when a job that must end
        first declares none."""
        session = self.session
        pending = [t for t in job.tasks.values() if t.status is TaskStatus.PENDING]
        per_task = max((t.request.quota_gpus() for t in pending), default=0.0)
        if per_task <= 0:
            return session.now
        held: list[tuple[float, list[tuple[float, float]]]] = []
        times = {session.now}
        for name in nodes:
            node = session.node_by_name.get(name)
            if node is None:
                continue
            ends = [(_end(session, t), t.request.quota_gpus()) for t in node.tasks.values()
                    if t.status in ACTIVE_ALLOCATED and t.job != job.uid]
            held.append((node.idle_gpu_sum() + node.releasing_gpu_sum(), ends))
            times.update(end for end, _ in ends)
        for at in sorted(times):
            if math.isinf(at):
                return None
            slots = sum(int((free + sum(g for end, g in ends if end <= at)) / per_task + 1e-9) for free, ends in held)
            if slots >= len(pending):
                return at
        return None

    def reserve(self, job: Job) -> None:
        """Reserve nodes for ``job``, which allocate could not place, when the policy lets it and it holds no active
        reservation (an expired one is replaced: the nodes are chosen again)."""
        session, policy = self.session, self.policy
        if job.reservation is not None and job.reservation.active(session.now) or not waiting(job):
            return
        pending = [t for t in job.tasks.values() if t.status is TaskStatus.PENDING]
        need = sum(t.request.quota_gpus() for t in pending)
        if not policy.may_reserve(job, need) or session.job_over_capacity(job, pending) is not None:
            return
        nodes = self._choose(job)
        if nodes is not None:
            now = session.now
            self._hold(job, Reservation(nodes, now, now + policy.duration, self.expected_start(job, nodes)))

    def _choose(self, job: Job) -> tuple[str, ...] | None:
        """The nodes not held for others that could host ``job``'s largest pending task, those expected to free
        first, then those with the most idle GPUs, until they have room for every pending task; None when there
        are not enough or they would take the reservations above ``maxGPUs``."""
        session = self.session
        pending = [t for t in job.tasks.values() if t.status is TaskStatus.PENDING]
        if not pending:
            return None
        largest = max(pending, key=lambda t: t.request.quota_gpus())
        per_task = largest.request.quota_gpus()
        if per_task <= 0:
            return None
        ranked = sorted((n for n in session.nodes if n.name not in self.holder and _may_host(n, largest)),
                        key=lambda n: (self._free_at(n, job), -n.idle_gpu_sum(), n.sort_key))
        chosen: list[NodeInfo] = []
        slots = 0
        for node in ranked:
            if slots >= len(pending):
                break
            chosen.append(node)
            slots += int(node.allocatable.gpu // per_task + 1e-9)
        if slots < len(pending):
            return None
        gpus = sum(n.allocatable.gpu for n in chosen)
        held = sum(session.node_by_name[name].allocatable.gpu for name in self.holder)
        if self.policy.max_gpus >= 0 and held + gpus > self.policy.max_gpus:
            return None
        return tuple(sorted(n.name for n in chosen))

    def explain(self, job: Job) -> None:
        """Record the active reservation of a job allocate could not place as one of its fit errors (reason
        ``NodesReserved``): the PodGroup's events and condition and the visibility API show it."""
        held = job.reservation
        if held is None or not held.active(self.session.now):
            return
        self.session.add_job_fit_error(job, reservation_message(held, self.session.now),
                                       reason=names.REASON_NODES_RESERVED)

    def _free_at(self, node: NodeInfo, job: Job) -> float:
        """When every job on ``node`` other than ``job`` is expected to end (infinite: unknown)."""
        session = self.session
        return max((_end(session, t) for t in node.tasks.values()
                    if t.status in ACTIVE_ALLOCATED and t.job != job.uid), default=session.now)


def reservations(session: Session) -> Reservations:
    """The session's reservations, worked out on first use."""
    if session.reservations is None:
        session.reservations = Reservations(session)
    return session.reservations


def reservation_message(held: Reservation, now: float) -> str:
    """What a reservation holds, until when, and when its gang is expected to fit (when that is later than now)."""
    message = f"Nodes {', '.join(held.nodes)} are reserved for the workload until {rfc3339(held.until)}"
    if held.start is None:
        return f"{message}; when they free up is not known"
    return f"{message}; expected to fit from {rfc3339(held.start)}" if held.start > now else message


def waiting(job: Job) -> bool:
    """The job has pending tasks and is below its gang size."""
    return job.has_pending() and not job.is_gang_satisfied()


def _end(session: Session, task: Task) -> float:
    """When ``task``'s job is expected to end: its runtime end (not before now), infinite when it declares none."""
    job = session.jobs.get(task.job)
    end = job.runtime_end() if job is not None else None
    return math.inf if end is None else max(end, session.now)


def _may_host(node: NodeInfo, task: Task) -> bool:
    """Whether ``node``, once empty, could take ``task``: schedulable, ready, enough GPUs, its labels selected."""
    n = node.node
    if n.unschedulable or not n.ready or n.allocatable.gpu + 1e-9 < task.request.quota_gpus():
        return False
    labels = n.labels
    if any(labels.get(k) != v for k, v in task.node_selector.items()):
        return False
    return not task.node_affinity or any(all(r.matches(labels) for r in term) for term in task.node_affinity)

