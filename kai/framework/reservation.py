"""Reservations: a large gang that cannot start holds the room it needs as it frees up; short jobs backfill.

A gang the allocate action cannot place, which the policy lets reserve (``reservation`` in the configuration:
its queue, its priority, at least ``minGPUs`` pending GPUs), plans on the nodes no other gang holds that could host
its tasks. Its expected start is the first time they have room for every pending task, counted from the declared
maximum runtimes of the jobs on them (:attr:`Job.max_runtime <kai.api.Job.max_runtime>`; None when a job that must
end first declares none). It holds the nodes with room then that have it first, as few as take every task, and on
each only what the tasks it takes there ask for; all reservations hold at most ``maxGPUs`` GPUs. The reservation is
the job's (:attr:`Job.reservation <kai.api.Job.reservation>`): the nodes, since when, until when (``maxDuration``
later) and the expected start. Every cycle each holder, higher priority and older first, plans again the same way,
so that its nodes and start follow the cluster; since and until stay.

While the reservation holds, another job is placed on its nodes only when it backfills (it declares a maximum
runtime and ends before the expected start) or what it asks fits beside what the gang needs there at that start
(counting it as still running then). That holds for every placement the actions make, the eviction actions'
preemptors and the victims they move too (evicting pods on reserved nodes is not held back). A reservation is
released when its gang is placed, leaves or the policy is off; when it expires, the gang's next failed attempt
reserves again, the nodes chosen afresh.

A driver keeps the reservation with the job between cycles (live: the PodGroup's ``kai.scheduler/reservation``
annotation), so a restarted scheduler finds it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
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
#: CPU, memory and GPUs.
Amounts = tuple[float, float, float]
#: What a node has free now, and when each task on it is expected to end with what it frees then.
Profile = tuple[Amounts, list[tuple[float, Amounts]]]


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
    #: Most GPUs all reservations hold together; negative: no limit.
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
    """The reservations of one session: which job holds each node, and what it needs there, as allocate sees them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.policy: ReservationPolicy = session.plugins.config.reservation
        #: Node name -> the job whose active reservation holds it.
        self.holder: dict[str, Job] = {}
        #: Node name -> what its holder's tasks need there at the expected start: (CPU, memory, GPUs).
        self.need: dict[str, Amounts] = {}
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
        # every cycle each holder, higher priority and older first, plans again on the cluster as it is now
        for job in sorted(active, key=lambda j: (-j.priority, j.creation, j.uid)):
            assert job.reservation is not None
            plan = self._plan(job, self._free_nodes(job), whole=True) or self._plan(job, [
                self.session.node_by_name[n] for n in job.reservation.nodes
                if n in session.node_by_name and n not in self.holder], whole=False)
            if plan is None:
                self._set(job, attrs.evolve(job.reservation, nodes=(), start=None))
                continue
            self._hold(job, attrs.evolve(job.reservation, nodes=tuple(sorted(plan[1])), start=plan[0]), plan[1])

    def _hold(self, job: Job, reservation: Reservation, need: dict[str, Amounts]) -> None:
        self._set(job, reservation)
        for name, amounts in need.items():
            self.holder[name] = job
            self.need[name] = amounts

    def _set(self, job: Job, reservation: Reservation | None) -> None:
        if reservation != job.reservation:
            self.session.journal.job(job)
            job.reservation = reservation

    def closed_to(self, job: Job, tasks: Iterable[Task]) -> set[int]:
        """Positions of the nodes held for other jobs that ``job`` may not use to place ``tasks``: it neither
        backfills (ends before the holder's expected start) nor fits beside what the holder needs there at that
        start. What it asks for is its pending tasks and ``tasks`` -- also those an eviction action moves, which
        are not pending."""
        if not self.holder:
            return set()
        now, node_by_name = self.session.now, self.session.node_by_name
        asked: Amounts | None = None
        closed = set()
        for name, owner in self.holder.items():
            if owner is job:
                continue
            start = owner.reservation.start if owner.reservation is not None else None
            if job.max_runtime is not None and start is not None and now + job.max_runtime <= start:
                continue
            if asked is None:
                placing = {t.uid: t for t in job.tasks.values() if t.status is TaskStatus.PENDING}
                asked = _total({**placing, **{t.uid: t for t in tasks}}.values())
            node = node_by_name[name]
            spare = _minus(_free_at(self._profile(node, owner), now if start is None else start), self.need[name])
            if not _fits(asked, spare):
                closed.add(node.index)
        return closed

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
        plan = self._plan(job, self._free_nodes(job), whole=True)
        if plan is not None:
            now = session.now
            self._hold(job, Reservation(tuple(sorted(plan[1])), now, now + policy.duration, plan[0]), plan[1])

    def _free_nodes(self, job: Job) -> list[NodeInfo]:
        """The nodes no other job holds that could host ``job``'s largest pending task once empty."""
        largest = _largest(job)
        if largest is None:
            return []
        return [n for n in self.session.nodes if n.name not in self.holder and _may_host(n, largest)]

    def _plan(self, job: Job, nodes: list[NodeInfo], whole: bool) -> tuple[float | None, dict[str, Amounts]] | None:
        """The expected start of ``job`` on ``nodes`` and what it needs on each node it holds.

        The expected start is the first time the nodes have room for every pending task (each as large as the
        largest), counting each other job on them as gone at its last start plus its declared maximum runtime;
        None when a job that would have to end first declares none. The nodes held are those with room then,
        those that have it first, as few as take every task; each holds room for the tasks it takes. Not
        ``whole``: the nodes are held even when they never have room for every task (the start is None). None
        when no node has room, or (``whole``) not enough, or the reservations would hold more than ``maxGPUs``."""
        largest = _largest(job)
        if largest is None or not nodes:
            return None
        per_task = _amounts(largest)
        if per_task[2] <= 0:
            return None
        count = sum(1 for t in job.tasks.values() if t.status is TaskStatus.PENDING)
        profiles = [self._profile(node, job) for node in nodes]
        gpus = [free[2] for free, _ in profiles]
        slots = [_slots(g, per_task) for g in gpus]
        ready = [self.session.now] * len(nodes)
        total = sum(slots)
        start = None
        ends = sorted((end, i, amounts[2]) for i, (_, node_ends) in enumerate(profiles) for end, amounts in node_ends)
        k = 0
        for at in [self.session.now, *dict.fromkeys(end for end, _, _ in ends)]:
            if math.isinf(at):
                break
            while k < len(ends) and ends[k][0] <= at:
                _, i, freed = ends[k]
                k += 1
                gpus[i] += freed
                if (now_slots := _slots(gpus[i], per_task)) > slots[i]:
                    total += now_slots - slots[i]
                    slots[i], ready[i] = now_slots, at
            if total >= count:
                start = at
                break
        if start is None:  # when every job ends: the jobs without a declared runtime too
            for _, i, freed in ends[k:]:
                gpus[i] += freed
                if (now_slots := _slots(gpus[i], per_task)) > slots[i]:
                    slots[i], ready[i] = now_slots, math.inf
        ranked = sorted((ready[i], -slots[i], node.idle_gpu_sum(), node.sort_key, node.name, slots[i])
                        for i, node in enumerate(nodes) if slots[i] > 0)
        need: dict[str, Amounts] = {}
        left = count
        for *_, name, room in ranked:
            if left <= 0:
                break
            take = min(room, left)
            need[name] = (take * per_task[0], take * per_task[1], take * per_task[2])
            left -= take
        if not need or whole and left > 0:
            return None
        held = sum(self.need[name][2] for name in self.holder)
        if self.policy.max_gpus >= 0 and held + sum(n[2] for n in need.values()) > self.policy.max_gpus + 1e-9:
            return None
        return (start if left <= 0 else None), need

    def _profile(self, node: NodeInfo, job: Job) -> Profile:
        """What ``node`` has free now (idle and releasing) and, for each task of a job other than ``job`` on it,
        when it is expected to end and what it frees then."""
        session = self.session
        free = node.non_allocated
        ends = [(_end(session, t), _amounts(t)) for t in node.tasks.values()
                if t.status in ACTIVE_ALLOCATED and t.job != job.uid]
        return (free.cpu, free.memory, node.idle_gpu_sum() + node.releasing_gpu_sum()), ends

    def explain(self, job: Job) -> None:
        """Record the active reservation of a job allocate could not place as one of its fit errors (reason
        ``NodesReserved``): the PodGroup's events and condition and the visibility API show it."""
        held = job.reservation
        if held is None or not held.active(self.session.now):
            return
        self.session.add_job_fit_error(job, reservation_message(held, self.session.now),
                                       reason=names.REASON_NODES_RESERVED)


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


def _largest(job: Job) -> Task | None:
    """The pending task of ``job`` that asks for the most GPUs."""
    return max((t for t in job.tasks.values() if t.status is TaskStatus.PENDING),
               key=lambda t: t.request.quota_gpus(), default=None)


def _amounts(task: Task) -> Amounts:
    return task.request.cpu, task.request.memory, task.request.quota_gpus()


def _total(tasks: Iterable[Task]) -> Amounts:
    cpu = memory = gpus = 0.0
    for t in tasks:
        c, m, g = _amounts(t)
        cpu, memory, gpus = cpu + c, memory + m, gpus + g
    return cpu, memory, gpus


def _free_at(profile: Profile, at: float) -> Amounts:
    """What a node whose ``profile`` it is has free at ``at``."""
    (cpu, memory, gpus), ends = profile
    for end, (c, m, g) in ends:
        if end <= at:
            cpu, memory, gpus = cpu + c, memory + m, gpus + g
    return cpu, memory, gpus


def _minus(a: Amounts, b: Amounts) -> Amounts:
    return a[0] - b[0], a[1] - b[1], a[2] - b[2]


def _fits(asked: Amounts, spare: Amounts) -> bool:
    return all(x <= y + 1e-9 for x, y in zip(asked, spare))


def _slots(gpus: float, per_task: Amounts) -> int:
    """How many tasks of ``per_task`` GPUs ``gpus`` GPUs take."""
    return int(gpus / per_task[2] + 1e-9)


def _end(session: Session, task: Task) -> float:
    """When ``task``'s job is expected to end: its runtime end (not before now), infinite when it declares none."""
    job = session.jobs.get(task.job)
    end = job.runtime_end() if job is not None else None
    return math.inf if end is None else max(end, session.now)


def _may_host(node: NodeInfo, task: Task) -> bool:
    """Whether ``node``, once empty, could take ``task``: schedulable, ready, enough GPUs, no taint it does not
    tolerate (``NoSchedule``, ``NoExecute``), its labels selected."""
    n = node.node
    if n.unschedulable or not n.ready or n.allocatable.gpu + 1e-9 < task.request.quota_gpus():
        return False
    if any(taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in task.tolerations)
           for taint in n.taints):
        return False
    labels = n.labels
    if any(labels.get(k) != v for k, v in task.node_selector.items()):
        return False
    return not task.node_affinity or any(all(r.matches(labels) for r in term) for term in task.node_affinity)

