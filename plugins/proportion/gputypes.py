"""GPU quota per resource type: a queue's ``resource_types`` (a GPU model or node pool, chosen by node labels).

A type's GPUs are those of the ready, schedulable nodes its node selector matches (types never share a node:
the snapshot checks it). A queue *takes part* in a type when it or a queue below it gives a quota for the type;
the type's GPUs are divided down the tree among those queues by the same rules as the cluster's GPUs, with
the quota, limit and over-quota weight the queue gives for the type (a queue that takes part only for its
children deserves the sum of theirs, has no limit and its total over-quota weight).

A job whose queue (or an ancestor) gives resource types places GPU tasks only on nodes of the types every such
queue of its chain gives with a limit other than 0, and within each type's limits. Its pending GPUs count as
requested in each of those types. The queue order and reclaim compare queues per type too; queues without
resource types, and clusters where no queue gives one, are scheduled on the total GPUs alone.
"""

from __future__ import annotations

from kai.sdk import (
    ACTIVE_ALLOCATED,
    ALLOCATED,
    GPU_WORKER_LABEL,
    MIG_PREFIX,
    UNLIMITED,
    Reject,
    TaskStatus,
    divide_tree_explained,
    memory_base,
    mig_gpu_slices,
)

from .shares import GPU, leq, quantify


class TypeShare:
    """One queue's GPU quota, fair share, allocation and request on one type."""

    __slots__ = ("name", "parent", "priority", "creation", "deserved", "limit", "weight", "fair_share", "allocated",
                 "allocated_np", "request", "reason")

    def __init__(self, queue, deserved: float, limit: float, weight: float) -> None:
        self.name, self.parent, self.priority, self.creation = queue.name, queue.parent, queue.priority, queue.creation
        self.deserved, self.limit, self.weight = deserved, limit, weight
        self.fair_share = self.allocated = self.request = 0.0
        #: What non-preemptible jobs hold of the type.
        self.allocated_np = 0.0
        #: The code of the rule that bounded the fair share (``kai.framework.FAIR_SHARE_REASONS``).
        self.reason = 0

    def allocatable(self) -> float:
        """As :meth:`.shares.QueueShare.allocatable`, for this type's GPUs."""
        if self.deserved == UNLIMITED:
            return self.limit
        value = max(self.deserved, self.fair_share)
        return value if self.limit == UNLIMITED else min(self.limit, value)


class GpuType:
    """A resource type: its node selector, its GPUs and the shares of the queues taking part."""

    __slots__ = ("name", "selector", "capacity", "shares")

    def __init__(self, name: str, selector: dict[str, str]) -> None:
        self.name, self.selector = name, selector
        self.capacity = 0.0
        self.shares: dict[str, TypeShare] = {}


class GpuTypes:
    """The session's resource types, which type each node is of, and what each leaf queue may use."""

    def __init__(self, session, types: dict[str, GpuType], gpu_memory: float) -> None:
        self.types = types
        self.gpu_memory = gpu_memory
        #: The type of each node that is of one.
        self.node_type: dict[str, GpuType] = {}
        restrict = session.plugins.config.restrict_node_scheduling
        for n in session.nodes:
            t = next((t for t in types.values() if all(n.node.labels.get(k) == v for k, v in t.selector.items())),
                     None)
            if t is None:
                continue
            self.node_type[n.name] = t
            node = n.node
            if node.ready and not node.unschedulable and not (restrict and GPU_WORKER_LABEL not in node.labels):
                a = node.allocatable
                t.capacity += max(a.gpu, 0.0) + sum(mig_gpu_slices(k) * v for k, v in a.scalars.items()
                                                    if k.startswith(MIG_PREFIX) and v > 0)
        self._allowed: dict[str, tuple[GpuType, ...] | None] = {}
        self._chains: dict[tuple[str, str], list[TypeShare]] = {}

    def allowed(self, session, queue: str) -> tuple[GpuType, ...] | None:
        """The types a job of leaf ``queue`` may use: those every queue of its chain that gives types gives with a
        limit other than 0, in name order; None when no queue of the chain gives types (any node)."""
        if queue not in self._allowed:
            names: set[str] | None = None
            for q in session.ancestors(queue):
                if q.resource_types:
                    given = {t.name for t in q.resource_types if t.gpu.limit != 0}
                    names = given if names is None else names & given
            self._allowed[queue] = None if names is None else tuple(self.types[n] for n in sorted(names))
        return self._allowed[queue]

    def chain(self, session, queue: str, t: GpuType) -> list[TypeShare]:
        """The shares on ``t`` of ``queue`` and its ancestors that take part in it, leaf first."""
        key = (queue, t.name)
        chain = self._chains.get(key)
        if chain is None:
            chain = self._chains[key] = [t.shares[q.name] for q in session.ancestors(queue) if q.name in t.shares]
        return chain

    def add_job(self, session, job) -> None:
        """Count the job's allocated GPUs on typed nodes into their type, and its pending ones into every type it
        may use."""
        allowed = self.allowed(session, job.queue)
        for task in job.tasks.values():
            if task.status in ALLOCATED:
                t = self.node_type.get(task.node or "")
                if t is None:
                    continue
                gpus = quantify(task.request, memory_base(session.node_by_name.get(task.node), self.gpu_memory))[GPU]
                for ts in self.chain(session, job.queue, t):
                    ts.allocated += gpus
                    ts.request += gpus
                    if not job.preemptible:
                        ts.allocated_np += gpus
            elif task.status is TaskStatus.PENDING and allowed:
                gpus = quantify(task.request, self.gpu_memory)[GPU]
                for t in allowed:
                    for ts in self.chain(session, job.queue, t):
                        ts.request += gpus

    def divide(self) -> None:
        """Divide each type's GPUs among the queues taking part in it."""
        for t in self.types.values():
            order = sorted(t.shares.values(), key=lambda s: (s.creation, s.name.encode()))
            index = {s.name: i for i, s in enumerate(order)}
            fair, reasons = divide_tree_explained(
                t.capacity, [index.get(s.parent, -1) if s.parent else -1 for s in order], [s.deserved for s in order],
                [s.limit for s in order], [s.weight for s in order], [s.priority for s in order],
                [s.request for s in order], [0.0] * len(order), list(range(len(order))), 0.0)
            for s, value, reason in zip(order, fair, reasons):
                s.fair_share, s.reason = value, reason

    def charge(self, session, task, node, sign: float) -> None:
        """Keep the types' allocations current as ``task`` is placed on ``node`` (``sign`` 1) or taken off it
        (-1)."""
        t = self.node_type.get(node.name) if node is not None else None
        job = session.jobs.get(task.job)
        if t is None or job is None:
            return
        gpus = quantify(task.request, memory_base(node, self.gpu_memory))[GPU]
        for ts in self.chain(session, job.queue, t):
            ts.allocated += sign * gpus
            if not job.preemptible:
                ts.allocated_np += sign * gpus

    def veto(self, session, task, job, node) -> Reject | None:
        """Why ``task`` may not go on ``node``: not of a type its queue may use, over a type's limit, or -- a task of a
        non-preemptible job -- over a type's deserved quota with what non-preemptible jobs hold there."""
        allowed = self.allowed(session, job.queue)
        if allowed is None:
            return None
        gpus = quantify(task.request, memory_base(node, self.gpu_memory))[GPU]
        if not gpus:
            return None
        t = self.node_type.get(node.name)
        if t is None or t not in allowed:
            return Reject("proportion", f"node(s) didn't match the GPU types of queue {job.queue} "
                                        f"({', '.join(a.name for a in allowed) or 'none'})")
        for ts in self.chain(session, job.queue, t):
            if ts.limit != UNLIMITED and ts.limit < ts.allocated + gpus - 1e-9:
                return Reject("proportion", f"node(s) of GPU type {t.name}, where queue {ts.name} has reached its "
                                            f"limit of {ts.limit:g} GPUs ({ts.allocated:g} allocated)")
            if not job.preemptible and ts.deserved != UNLIMITED and ts.deserved < ts.allocated_np + gpus - 1e-9:
                return Reject("proportion", f"node(s) of GPU type {t.name}, where non-preemptible jobs of queue "
                                            f"{ts.name} would go over its deserved quota of {ts.deserved:g} GPUs "
                                            f"({ts.allocated_np:g} allocated)")
        return None


def build(session, gpu_memory: float) -> GpuTypes | None:
    """The session's resource types with their shares counted and divided; None when no queue gives one."""
    types: dict[str, GpuType] = {}
    for q in session.queues.values():
        for given in q.resource_types:
            types.setdefault(given.name, GpuType(given.name, given.node_selector))
    if not types:
        return None
    for q in session.queues.values():
        for given in q.resource_types:
            t = types[given.name]
            t.shares[q.name] = TypeShare(q, given.gpu.deserved, given.gpu.limit, given.gpu.over_quota_weight)
    for t in types.values():  # the ancestors take part for their children
        given = set(t.shares)
        for name in sorted(given):
            for q in session.ancestors(name)[1:]:
                if q.name not in t.shares:
                    t.shares[q.name] = TypeShare(q, 0.0, UNLIMITED, q.gpu.over_quota_weight)
        _sum_children(session, t, given)
    out = GpuTypes(session, types, gpu_memory)
    for job in session.jobs.values():
        out.add_job(session, job)
    out.divide()
    return out


def _sum_children(session, t: GpuType, given: set[str]) -> None:
    """Set the deserved quota of each queue taking part in ``t`` only for its children: the sum of theirs (-1 when
    one of them is unlimited)."""
    for name in sorted(t.shares, key=lambda n: (-len(session.ancestors(n)), n)):
        s = t.shares[name]
        parent = t.shares.get(s.parent) if s.parent else None
        if parent is None or parent.name in given:
            continue
        if parent.deserved != UNLIMITED:
            parent.deserved = UNLIMITED if s.deserved == UNLIMITED else parent.deserved + s.deserved


def request_in(plugin, session, job, t: GpuType) -> float:
    """The GPUs of ``job``'s next step it would take in type ``t`` (all of them when it may use ``t``)."""
    allowed = plugin.types.allowed(session, job.queue)
    return plugin.job_request(session, job)[GPU] if allowed and t in allowed else 0.0


def can_reclaim(plugin, session, job) -> Reject | None:
    """A job of a queue with resource types reclaims only when some type it may use keeps its queue (the lowest of
    its chain giving the type) within its fair share of that type with the job."""
    types = plugin.types
    allowed = types.allowed(session, job.queue)
    if not allowed:
        return None
    gpus = plugin.job_request(session, job)[GPU]
    if not gpus:
        return None
    for t in allowed:
        own = types.chain(session, job.queue, t)[0]  # the lowest queue giving the type
        if leq(own.allocated + gpus, own.fair_share):
            return None
    return Reject("proportion", f"queue {job.queue} would go over its fair share of every GPU type it may use "
                                f"({', '.join(t.name for t in allowed)})")


def allocations(plugin) -> dict[tuple[str, str], float]:
    """Every queue's allocation per type, by (type, queue): what a reclaim scenario is judged against."""
    return {(t.name, name): ts.allocated for t in plugin.types.types.values() for name, ts in t.shares.items()}


def validate(plugin, session, job, victims: dict[str, list], before: dict[tuple[str, str], float],
             leveled) -> Reject | None:
    """Per type, the reclaim strategies of :mod:`.reclaim` on the GPUs taken from each victim queue that takes part
    in the type as the reclaimer's queue does: before each chunk of a victim job (each task beyond its pod set's
    gang size alone, the rest together) the victim side is above its allocatable share of the type, or the
    reclaimer side stays within its deserved quota of the type with the job and the victim side is above its own."""
    types = plugin.types
    ignore_moved = session.plugins.config.allow_consolidating_reclaim
    left: dict[tuple[str, str], float] = {}
    for uid, tasks in victims.items():
        victim = session.jobs[uid]
        by_type: dict[str, list] = {}
        for task in tasks:
            if ignore_moved and task.status in ACTIVE_ALLOCATED:
                continue
            t = types.node_type.get(task.node or "")
            if t is not None:
                by_type.setdefault(t.name, []).append(task)
        for name, on_type in by_type.items():
            t = types.types[name]
            mine_name, theirs_name = leveled(session, job.queue, victim.queue)
            mine, theirs = t.shares.get(mine_name), t.shares.get(theirs_name)
            if mine is None or theirs is None or mine is theirs:
                continue
            request = request_in(plugin, session, job, t)
            within = leq(before[(name, mine.name)] + request, mine.deserved)
            remaining = left.setdefault((name, theirs.name), before[(name, theirs.name)])
            for chunk in _chunks(plugin, session, victim, on_type):
                if not chunk:
                    continue
                if leq(remaining, theirs.allocatable()) and not (within and not leq(remaining, theirs.deserved)):
                    return Reject("proportion", f"queue {theirs.name} is not above what the reclaim strategies "
                                                f"protect on GPU type {name}")
                remaining -= chunk
            left[(name, theirs.name)] = remaining
    return None


def _chunks(plugin, session, job, tasks) -> list[float]:
    """The GPUs of ``tasks`` of a victim job: each beyond its pod set's gang size alone, then the rest together."""
    by_set: dict[str, list] = {}
    for task in tasks:
        by_set.setdefault(task.pod_set, []).append(task)
    core, chunks = 0.0, []
    for name, members in by_set.items():
        n = job.pod_sets[name].min_available if name in job.pod_sets else len(members)
        for k, task in enumerate(members):
            gpus = quantify(task.request, memory_base(session.node_by_name.get(task.node), plugin.gpu_memory))[GPU]
            if k < n:
                core += gpus
            else:
                chunks.append(gpus)
    return [*chunks, core]


def order_vectors(plugin, session, left, right, left_job, right_job, left_victims, right_victims,
                  base: list) -> list:
    """The queue order's vectors of two sibling queues (``base``: fair share, allocated, request, victims, deserved,
    limit of each side, then the totals) with one more resource per type either queue takes part in; a queue
    that does not take part in a type is measured there by its total GPUs."""
    out = [list(v) if v is not None else None for v in base]
    for t in plugin.types.types.values():
        ls, rs = t.shares.get(left.name), t.shares.get(right.name)
        if ls is None and rs is None:
            continue
        for side, ts, job, victims in ((0, ls, left_job, left_victims), (6, rs, right_job, right_victims)):
            vectors = out[side:side + 6]
            if ts is None:
                for v in vectors:
                    if v is not None:
                        v.append(v[GPU])
                continue
            held = 0.0
            for victim in victims or ():
                held += _held_on(plugin, session, victim, t)
            values = (ts.fair_share, ts.allocated, request_in(plugin, session, job, t) if job is not None else 0.0,
                      held, ts.deserved, ts.limit)
            for v, value in zip(vectors, values):
                if v is not None:
                    v.append(value)
        totals = out[12]
        assert totals is not None
        totals.append(t.capacity)
    return out


def _held_on(plugin, session, job, t: GpuType) -> float:
    """The GPUs ``job`` holds in allocated statuses on nodes of type ``t``."""
    held = 0.0
    for task in job.tasks.values():
        if task.status in ALLOCATED and plugin.types.node_type.get(task.node or "") is t:
            held += quantify(task.request, memory_base(session.node_by_name.get(task.node), plugin.gpu_memory))[GPU]
    return held
