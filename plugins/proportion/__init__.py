"""``proportion``: hierarchical fair share (DRF), queue order, and queue capacity checks.

At session open the plugin divides the cluster's GPUs, CPU and memory down the queue tree
(deserved quota first, then over-quota by priority and weight) and keeps every queue's allocation
current through the allocation events. It orders sibling queues the way KAI does and vetoes jobs
that would take a queue over its limit, or a non-preemptible job over its deserved quota.
"""

from __future__ import annotations

from kai.sdk import (
    ACTIVE_ALLOCATED,
    ALLOCATED,
    Resources,
    core_tasks,
    hookimpl,
    max_node_gpu_memory,
    tasks_to_allocate,
)

from . import capacity, gputypes, queue_order, reclaim
from .core import joining_core
from .shares import (
    CPU,
    GPU,
    MEMORY,
    QueueShare,
    add_job,
    build_shares,
    divide,
    memory_base,
    min_node_gpu_memory,
    quantify,
)


class Proportion:
    name = "proportion"

    def __init__(self, k_value: float = 1.0, saturation_multiplier: float = 1.0):
        self.k_value = max(0.0, k_value)
        self.saturation_multiplier = max(1.0, saturation_multiplier)
        self.shares: dict[str, QueueShare] = {}
        self.totals = [0.0, 0.0, 0.0]
        self.gpu_memory = 100.0
        self.max_gpu_memory = 100.0
        self.requests: dict[str, list[float]] = {}
        #: The shares of each queue's chain up to the root, by leaf queue name (for this session).
        self.chains: dict[str, list] = {}
        self.solution: reclaim.ReclaimState | None = None
        #: The queues' GPU quota per resource type (:mod:`.gputypes`); None when no queue gives one.
        self.types: gputypes.GpuTypes | None = None

    @hookimpl
    def kai_session_open(self, session):
        self.shares, self.totals = build_shares(session, self.k_value)
        self.requests = {}
        self.chains = {}
        self.gpu_memory = min_node_gpu_memory(session)
        self.max_gpu_memory = max_node_gpu_memory(session)
        self.types = gputypes.build(session, self.gpu_memory)
        if self.types is None:
            session.calls.withdraw(self, ("kai_predicate", "kai_nodes_alike"))

    @hookimpl
    def kai_session_job_added(self, session, job):
        add_job(session, self.shares, job, self.gpu_memory)
        divide(self.shares, self.totals, self.k_value)
        if self.types is not None:
            self.types.add_job(session, job)
            self.types.divide()

    @hookimpl
    def kai_session_close(self, session):
        self.shares = {}
        self.chains = {}
        self.solution = None
        self.types = None

    @hookimpl
    def kai_predicate(self, session, task, job, node):
        return None if self.types is None else self.types.veto(session, task, job, node)

    @hookimpl
    def kai_nodes_alike(self, session, task, job):
        return self.types is None or self.types.allowed(session, job.queue) is None

    @hookimpl
    def kai_can_reclaim(self, session, job):
        return reclaim.can_reclaim(self, session, job)

    @hookimpl
    def kai_job_solution_start(self, session, job):
        self.solution = reclaim.ReclaimState(self, session, job)

    @hookimpl
    def kai_scenario_validator(self, session, action, scenario):
        if action != "reclaim" or self.solution is None:
            return None
        return reclaim.validate(self, session, scenario, self.solution)

    @hookimpl
    def kai_queue_resources(self, session, queue):
        qs = self.shares.get(queue.name)
        if qs is None:
            return None
        return tuple(Resources(v[CPU], v[MEMORY], v[GPU]) for v in (qs.allocated, qs.deserved, qs.fair_share))

    def job_request(self, session, job) -> list[float]:
        """(CPU, memory, GPU) of the job's next allocation step, tasks evicted in this session included (cached
        until the job's tasks move)."""
        total = self.requests.get(job.uid)
        if total is None:
            total = [0.0, 0.0, 0.0]
            for task in tasks_to_allocate(session, job, also=session.evicted, admission=False):
                for r, v in enumerate(quantify(task.request, self.gpu_memory)):
                    total[r] += v
            self.requests[job.uid] = total
        return total

    def core_request(self, session, job) -> list[float] | None:
        """The non-preemptible part of :meth:`job_request` (:mod:`.core`); None when it has none."""
        if not job.preemptible:
            return self.job_request(session, job)
        if not job.semi_preemptible:
            return None
        total = [0.0, 0.0, 0.0]
        for task in joining_core(job, tasks_to_allocate(session, job, also=session.evicted)):
            for r, v in enumerate(quantify(task.request, self.gpu_memory)):
                total[r] += v
        return total if any(total) else None

    def job_allocated(self, session, job) -> list[float]:
        """(CPU, memory, GPU) the job holds in allocated statuses."""
        total = [0.0, 0.0, 0.0]
        for task in job.tasks.values():
            if task.status in ALLOCATED:
                for r, v in enumerate(quantify(task.request, self.gpu_memory)):
                    total[r] += v
        return total

    @hookimpl
    def kai_queue_order(self, session, left, right, left_job, right_job, left_victims, right_victims):
        return queue_order.compare(self, session, left, right, left_job, right_job, left_victims, right_victims)

    @hookimpl
    def kai_job_over_capacity(self, session, job, tasks):
        # A GPU-memory request is measured on the largest devices: if even that share is over, it is over.
        request, in_core = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
        core = {id(t) for t in joining_core(job, tasks)}
        for task in tasks:
            for r, v in enumerate(quantify(task.request, self.max_gpu_memory)):
                request[r] += v
                if id(task) in core:
                    in_core[r] += v
        return capacity.check(self, session, job, request, in_core)

    @hookimpl
    def kai_task_over_capacity(self, session, task, job, node):
        request = quantify(task.request, memory_base(node, self.gpu_memory))
        if node is not None and task.request.gpu_memory_mib:  # the share of this node's devices it would get
            request[GPU] = task.request.accepted_gpus(memory_base(node, self.gpu_memory))
        return capacity.check(self, session, job, request, request if joining_core(job, [task]) else [0.0, 0.0, 0.0])

    def chain(self, session, queue: str) -> list:
        """The shares of ``queue`` and its ancestors that have shares, leaf first."""
        chain = self.chains.get(queue)
        if chain is None:
            shares = self.shares
            chain = self.chains[queue] = [shares[q.name] for q in session.ancestors(queue) if q.name in shares]
        return chain

    def _charge(self, session, task, node, sign: float) -> None:
        job = session.jobs.get(task.job)
        if job is None:
            return
        self.requests.pop(job.uid, None)
        amounts = quantify(task.request, memory_base(session.node_by_name.get(task.node), self.gpu_memory))
        np_change: list[float] | None = None
        if job.semi_preemptible:
            np_change = self._core_change(session, job, task, sign)
        elif not job.preemptible:
            np_change = [sign * a for a in amounts]
        for qs in self.chain(session, job.queue):
            for r in range(3):
                qs.allocated[r] += sign * amounts[r]
                if np_change is not None:
                    qs.allocated_np[r] += np_change[r]
        if self.types is not None:
            self.types.charge(session, task, node, sign)

    def _core_change(self, session, job, task, sign: float) -> list[float]:
        """How a semi-preemptible job's core amount changes as ``task`` is placed (``sign`` 1) or taken off
        (-1): the core with the task placed less the core without it, or the other way round."""
        placed = {t.uid for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED}
        with_task, without = self._core_amount(session, job, placed | {task.uid}), \
            self._core_amount(session, job, placed - {task.uid})
        return [sign * (a - b) for a, b in zip(with_task, without)]

    def _core_amount(self, session, job, placed: set[str]) -> list[float]:
        """(CPU, memory, GPU) of a semi-preemptible job's core when ``placed`` are placed (on their nodes'
        memory base)."""
        total = [0.0, 0.0, 0.0]
        core = core_tasks(job, placed)
        for task in job.tasks.values():
            if task.uid in core:
                base = memory_base(session.node_by_name.get(task.node), self.gpu_memory)
                for r, v in enumerate(quantify(task.request, base)):
                    total[r] += v
        return total

    @hookimpl
    def kai_on_allocate(self, session, task, node):
        self._charge(session, task, node, 1.0)

    @hookimpl
    def kai_on_deallocate(self, session, task, node):
        self._charge(session, task, node, -1.0)


def build(arguments):
    multiplier = arguments.get("reclaimerSaturationMultiplier", arguments.get("relcaimerSaturationMultiplier", 1.0))
    return Proportion(float(arguments.get("kValue", 1.0)), float(multiplier))
