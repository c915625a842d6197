"""Per-queue resource shares of the proportion plugin, for GPU, CPU and memory.

Units: GPUs in devices (fractions, MIG slices and GPU memory converted to devices), CPU in
millicores, memory in bytes; ``-1`` means unlimited for deserved quota and limit.
"""

from __future__ import annotations

from kai.api import ALLOCATED, UNLIMITED, Queue, TaskStatus
from kai.framework import cluster_capacity, divide_tree_explained, memory_base, min_node_gpu_memory

#: The snapshot memo of the queues' allocations and requests as its first session counted them.
MEMO = "proportion"
#: Resource order of every vector here: KAI's (CPU, memory, GPU).
RESOURCES = ("cpu", "memory", "gpu")
CPU, MEMORY, GPU = range(3)


def quantify(request, gpu_memory_mib: float = 0.0) -> list[float]:
    """A task request as (CPU, memory, GPU quota)."""
    return [request.cpu, request.memory, request.quota_gpus(gpu_memory_mib)]


def leq(a: float, b: float) -> bool:
    """``a <= b`` where -1 is unlimited (larger than any amount)."""
    if a == UNLIMITED:
        return b == UNLIMITED
    return b == UNLIMITED or a <= b


class QueueShare:
    """One queue's quotas, fair share, allocation and request per resource."""

    __slots__ = ("queue", "name", "parent", "priority", "creation", "deserved", "limit", "weight",
                 "fair_share", "allocated", "allocated_np", "request", "usage", "reason")

    def __init__(self, queue: Queue):
        self.queue = queue
        self.name, self.parent, self.priority, self.creation = queue.name, queue.parent, queue.priority, queue.creation
        specs = (queue.cpu, queue.memory, queue.gpu)
        self.deserved = [s.deserved for s in specs]
        self.limit = [s.limit for s in specs]
        self.weight = [s.over_quota_weight for s in specs]
        self.fair_share = [0.0, 0.0, 0.0]
        self.allocated = [0.0, 0.0, 0.0]
        self.allocated_np = [0.0, 0.0, 0.0]
        self.request = [0.0, 0.0, 0.0]
        self.usage = [0.0, 0.0, 0.0]
        #: Per resource, the code of the rule that bounded the fair share (``kai.framework.FAIR_SHARE_REASONS``).
        self.reason = [0, 0, 0]

    def allocatable(self, r: int) -> float:
        """KAI's allocatable share: the limit when deserved is unlimited, else max(deserved, fair share) capped
        by the limit."""
        if self.deserved[r] == UNLIMITED:
            return self.limit[r]
        value = max(self.deserved[r], self.fair_share[r])
        return value if self.limit[r] == UNLIMITED else min(self.limit[r], value)


def build_shares(session, k_value: float) -> tuple[dict[str, QueueShare], list[float]]:
    """Queue shares with allocations, requests and fair shares computed for this session."""
    shares = {name: QueueShare(q) for name, q in session.queues.items()}
    counted = session.snapshot.memo.get(MEMO)
    if counted is None:
        gpu_mem = min_node_gpu_memory(session)
        for job in session.jobs.values():
            add_job(session, shares, job, gpu_mem)
        session.snapshot.memo[MEMO] = {name: (qs.allocated[:], qs.allocated_np[:], qs.request[:])
                                       for name, qs in shares.items()}
    else:  # a reused snapshot: its jobs are as they were when the first session on it counted them
        for name, (allocated, allocated_np, request) in counted.items():
            qs = shares[name]
            qs.allocated, qs.allocated_np, qs.request = allocated[:], allocated_np[:], request[:]
    for name, usage in session.snapshot.usage.items():
        if name in shares:
            shares[name].usage = list(usage)
    totals = cluster_capacity(session)
    divide(shares, totals, k_value)
    return shares, totals


def add_job(session, shares: dict[str, QueueShare], job, gpu_mem: float) -> None:
    """Count the job's allocated tasks as allocated and requested, its pending ones as requested, up its queue
    chain (``gpu_mem``: the smallest device's memory, the base of GPU-memory requests)."""
    chain = [shares[q.name] for q in session.ancestors(job.queue)]
    for task in job.tasks.values():
        if task.status in ALLOCATED:
            amounts = quantify(task.request, memory_base(session.node_by_name.get(task.node), gpu_mem))
            for qs in chain:
                for r in range(3):
                    qs.allocated[r] += amounts[r]
                    qs.request[r] += amounts[r]
                    if not job.preemptible:
                        qs.allocated_np[r] += amounts[r]
        elif task.status is TaskStatus.PENDING:
            amounts = quantify(task.request, gpu_mem)
            for qs in chain:
                for r in range(3):
                    qs.request[r] += amounts[r]


def divide(shares: dict[str, QueueShare], totals: list[float], k_value: float) -> None:
    """Set every queue's fair share (and the rule that bounded it) from the requests counted so far."""
    order = sorted(shares.values(), key=lambda s: (s.creation, s.name.encode()))
    index = {s.name: i for i, s in enumerate(order)}
    parent = [index[s.parent] if s.parent in index else -1 for s in order]
    for r in range(3):
        fair, reasons = divide_tree_explained(
            totals[r], parent, [s.deserved[r] for s in order], [s.limit[r] for s in order],
            [s.weight[r] for s in order], [s.priority for s in order], [s.request[r] for s in order],
            [s.usage[r] for s in order], list(range(len(order))), k_value,
        )
        for s, value, reason in zip(order, fair, reasons):
            s.fair_share[r], s.reason[r] = value, reason
