"""Per-queue resource shares of the proportion plugin, for GPU, CPU and memory.

Units: GPUs in devices (fractions, MIG slices and GPU memory converted to devices), CPU in
millicores, memory in bytes; ``-1`` means unlimited for deserved quota and limit.
"""

from __future__ import annotations

from kai.api import ALLOCATED, MIG_PREFIX, UNLIMITED, Queue, TaskStatus, mig_gpu_slices
from kai.framework import divide_tree

#: Resource order of every vector here: KAI's (CPU, memory, GPU).
RESOURCES = ("cpu", "memory", "gpu")
CPU, MEMORY, GPU = range(3)


def quantify(request, gpu_memory_mib: float = 0.0) -> list[float]:
    """A task request as (CPU, memory, GPU quota)."""
    return [request.cpu, request.memory, request.quota_gpus(gpu_memory_mib)]


class QueueShare:
    """One queue's quotas, fair share, allocation and request per resource."""

    __slots__ = ("queue", "name", "parent", "priority", "creation", "deserved", "limit", "weight",
                 "fair_share", "allocated", "allocated_np", "request", "usage")

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

    def allocatable(self, r: int) -> float:
        """KAI's allocatable share: the limit when deserved is unlimited, else max(deserved, fair share) capped
        by the limit."""
        if self.deserved[r] == UNLIMITED:
            return self.limit[r]
        value = max(self.deserved[r], self.fair_share[r])
        return value if self.limit[r] == UNLIMITED else min(self.limit[r], value)


def cluster_totals(session) -> list[float]:
    """What is divided at the top: allocatable of ready, schedulable nodes, MIG slices counted as GPUs."""
    totals = [0.0, 0.0, 0.0]
    for n in session.nodes:
        node = n.node
        if not node.ready or node.unschedulable:
            continue
        a = node.allocatable
        totals[CPU] += a.cpu
        totals[MEMORY] += a.memory
        totals[GPU] += a.gpu + sum(
            mig_gpu_slices(k) * v for k, v in a.scalars.items() if k.startswith(MIG_PREFIX)
        )
    return totals


def min_node_gpu_memory(session) -> float:
    """The smallest GPU memory (MiB) over nodes that report more than the default 100 MiB, else 100."""
    values = [n.node.gpu_memory_mib for n in session.nodes if n.node.gpu_memory_mib > 100]
    return float(min(values)) if values else 100.0


def build_shares(session, k_value: float) -> tuple[dict[str, QueueShare], list[float]]:
    """Queue shares with allocations, requests and fair shares computed for this session."""
    shares = {name: QueueShare(q) for name, q in session.queues.items()}
    gpu_mem = min_node_gpu_memory(session)
    for job in session.jobs.values():
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
    totals = cluster_totals(session)
    order = sorted(shares.values(), key=lambda s: (s.creation, s.name.encode()))
    index = {s.name: i for i, s in enumerate(order)}
    parent = [index[s.parent] if s.parent in index else -1 for s in order]
    for r in range(3):
        fair = divide_tree(
            totals[r], parent, [s.deserved[r] for s in order], [s.limit[r] for s in order],
            [s.weight[r] for s in order], [s.priority for s in order], [s.request[r] for s in order],
            [s.usage[r] for s in order], list(range(len(order))), k_value,
        )
        for s, value in zip(order, fair):
            s.fair_share[r] = value
    return shares, totals


def memory_base(node, default: float) -> float:
    """GPU memory (MiB) that a GPU-memory request on ``node`` is measured against: the node's devices,
    or ``default`` when the node is unknown or reports none."""
    return float(node.node.gpu_memory_mib) if node is not None and node.node.gpu_memory_mib else default
