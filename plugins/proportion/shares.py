"""Per-queue resource shares of the proportion plugin, for GPU, CPU and memory.

Units: GPUs in devices (fractions, MIG slices and GPU memory converted to devices), CPU in
millicores, memory in bytes; ``-1`` means unlimited for deserved quota and limit.
"""

from __future__ import annotations

from kai.sdk import (
    ALLOCATED,
    UNLIMITED,
    Job,
    MemoKey,
    Queue,
    TaskStatus,
    cluster_capacity,
    divide_tree_explained,
    memory_base,
    min_node_gpu_memory,
)

from .core import core_of

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


#: Whole amounts below this add up to the same float in any order (every partial sum is exact).
EXACT = 2.0**53


class Counted:
    """The memo: each queue's allocated, non-preemptible allocated and requested amounts as the snapshot built
    them, and what the snapshot after it needs to count only the jobs that changed -- the queue tree, each
    job's amounts as whole numbers (9: allocated, non-preemptible, requested) with whether they hold on any
    nodes (no GPU-memory request), the uids of those whose amounts do not, and the queues' sums of the amounts
    (None when some amount was not whole)."""

    __slots__ = ("queues", "tree", "jobs", "sums", "bound")

    def __init__(self, queues: dict, tree: dict, jobs: dict, sums: dict | None, bound: set[str] | None = None) -> None:
        self.queues: dict[str, tuple[list[float], list[float], list[float]]] = queues
        self.tree: dict[str, str | None] = tree
        self.jobs: dict[str, tuple[Job, list[int], bool]] = jobs
        self.sums: dict[str, list[int]] | None = sums
        self.bound: set[str] = bound if bound is not None else set()


#: The memo key of the queues' allocations and requests as the snapshot's first session counted them.
MEMO: MemoKey[Counted] = MemoKey("proportion")


def build_shares(session, k_value: float) -> tuple[dict[str, QueueShare], list[float]]:
    """Queue shares with allocations, requests and fair shares computed for this session."""
    shares = {name: QueueShare(q) for name, q in session.queues.items()}
    counted = session.snapshot.memo.get(MEMO)
    if counted is None:
        counted = _count_following(session, shares) or _count(session, shares)
        counted.queues = {name: (qs.allocated[:], qs.allocated_np[:], qs.request[:]) for name, qs in shares.items()}
        session.snapshot.memo[MEMO] = counted
    else:  # a reused snapshot: its jobs are as they were when the first session on it counted them
        for name, (allocated, allocated_np, request) in counted.queues.items():
            qs = shares[name]
            qs.allocated, qs.allocated_np, qs.request = allocated[:], allocated_np[:], request[:]
    for name, usage in session.snapshot.usage.items():
        if name in shares:
            shares[name].usage = list(usage)
    totals = cluster_capacity(session)
    divide(shares, totals, k_value)
    return shares, totals


def _count(session, shares: dict[str, QueueShare]) -> Counted:
    """Count every job of the session into ``shares``, task by task; for a snapshot that another is to follow,
    keep each job's amounts too."""
    gpu_mem = min_node_gpu_memory(session)
    jobs: dict[str, tuple[Job, list[int], bool]] = {}
    whole = session.snapshot.followed
    for uid, job in session.jobs.items():
        counted = add_job(session, shares, job, gpu_mem)
        if whole:
            amounts, portable = _whole(job, counted)
            if amounts is None:
                whole = False
            else:
                jobs[uid] = (job, amounts, portable)
    sums = None
    if whole:
        sums = {name: [0] * 9 for name in shares}
        for job, amounts, _ in jobs.values():
            _add_up(session, sums, job.queue, amounts, 1)
    kept = jobs if whole else {}
    return Counted({}, _tree(session), kept, sums, {uid for uid, (_, _, portable) in kept.items() if not portable})


def _count_following(session, shares: dict[str, QueueShare]) -> Counted | None:
    """Count from the memo of the snapshot this one follows (handed over): the jobs it took over whose amounts hold
    on any nodes are not counted again (nor looked at), the others' amounts are taken off or added. Whole amounts
    whose sums stay below :data:`EXACT` add up to exactly what counting every task gives; otherwise None
    (count them all)."""
    snapshot = session.snapshot
    before = snapshot.memo_before.get(MEMO)
    if before is None or before.sums is None or snapshot.changed is None or \
            before.tree != _tree(session):
        return None
    snapshot.memo_before.pop(MEMO)  # handed over: its jobs' amounts are brought up to date in place
    sums = {name: list(v) for name, v in before.sums.items()}
    redo = snapshot.changed | snapshot.gone | before.bound  # the jobs not the very objects of before, and the bound
    jobs = before.jobs
    bound = before.bound - redo
    gpu_mem: float | None = None
    for uid in redo:
        kept = jobs.pop(uid, None)
        job = session.jobs.get(uid)
        if kept is not None and kept[0] is job and kept[2]:
            jobs[uid] = kept
            continue
        if kept is not None:
            _add_up(session, sums, kept[0].queue, kept[1], -1)  # gone, or counted again below
        if job is None:
            continue
        if gpu_mem is None:
            gpu_mem = min_node_gpu_memory(session)
        amounts, portable = job_amounts(session, job, gpu_mem)
        if amounts is None:
            return None
        _add_up(session, sums, job.queue, amounts, 1)
        jobs[uid] = (job, amounts, portable)
        if not portable:
            bound.add(uid)
    if any(v >= EXACT for values in sums.values() for v in values):
        return None
    for name, values in sums.items():
        qs = shares[name]
        qs.allocated = [float(v) for v in values[0:3]]
        qs.allocated_np = [float(v) for v in values[3:6]]
        qs.request = [float(v) for v in values[6:9]]
    return Counted({}, before.tree, jobs, sums, bound)


def _tree(session) -> dict[str, str | None]:
    return {name: q.parent for name, q in session.queues.items()}


def _add_up(session, sums: dict[str, list[int]], queue: str, amounts: list[int], sign: int) -> None:
    for q in session.ancestors(queue):
        values = sums[q.name]
        for r in range(9):
            values[r] += sign * amounts[r]


def job_amounts(session, job, gpu_mem: float) -> tuple[list[int] | None, bool]:
    """What :func:`add_job` counts for ``job``, as whole numbers (9: allocated, non-preemptible allocated,
    requested; None when some amount is not whole), and whether it holds on any nodes."""
    return _whole(job, list(task_amounts(session, job, gpu_mem)))


def _whole(job, counted: list[tuple[bool, bool, list[float]]]) -> tuple[list[int] | None, bool]:
    """The sums of the job's ``counted`` amounts (whether allocated, whether non-preemptible, the amounts), see
    :func:`job_amounts`."""
    amounts = [0] * 9
    for allocated, core, values in counted:
        for r, v in enumerate(values):
            if not float(v).is_integer():
                return None, False
            amounts[6 + r] += int(v)
            if allocated:
                amounts[r] += int(v)
                if core:
                    amounts[3 + r] += int(v)
    return amounts, not any(t.request.gpu_memory_mib for t in job.tasks.values())


def task_amounts(session, job, gpu_mem: float):
    """Whether allocated, whether non-preemptible (:mod:`.core`), and the amounts, of each of the job's tasks that
    counts: allocated tasks on their node's memory base, pending ones on ``gpu_mem`` (the smallest device's memory,
    the base of GPU-memory requests)."""
    core = core_of(job)
    for task in job.tasks.values():
        if task.status in ALLOCATED:
            yield True, core is None or task.uid in core, quantify(
                task.request, memory_base(session.node_by_name.get(task.node), gpu_mem))
        elif task.status is TaskStatus.PENDING:
            yield False, False, quantify(task.request, gpu_mem)


def add_job(session, shares: dict[str, QueueShare], job, gpu_mem: float) -> list[tuple[bool, bool, list[float]]]:
    """Count the job's allocated tasks as allocated and requested, its pending ones as requested, up its queue
    chain; what was counted per task (:func:`task_amounts`)."""
    chain = [shares[q.name] for q in session.ancestors(job.queue)]
    counted = list(task_amounts(session, job, gpu_mem))
    for allocated, core, amounts in counted:
        for qs in chain:
            for r in range(3):
                if allocated:
                    qs.allocated[r] += amounts[r]
                qs.request[r] += amounts[r]
                if allocated and core:
                    qs.allocated_np[r] += amounts[r]
    return counted


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
