"""Per-session node state: resource arrays for the hot loops and a NodeInfo view per node.

The arrays (``array('d')``, one slot per node) are the source of truth for idle and releasing
CPU, memory, whole GPUs and pod slots; the compiled fit loop reads them directly. Extended
resources (MIG profiles, other scalars) are kept per node in dicts and checked in Python. Shared
GPU devices are tracked per node by :mod:`kai.framework.gpusharing`, only for shared-GPU tasks.
"""

from __future__ import annotations

import itertools
import operator
import uuid
from array import array
from collections.abc import Callable, Collection, Container
from typing import TYPE_CHECKING

from kai.api import ACTIVE_USED, EPSILON, Job, Node, Resources, Task, TaskStatus, is_mig_resource, mig_gpu_slices
from kai.framework.gpusharing import (
    GpuGroup,
    add_shared,
    fitting_groups,
    remove_shared,
    shared_free_gpus,
    shared_releasing_gpus,
    used_portion,
)

if TYPE_CHECKING:
    from kai.framework.nodeclasses import NodeClasses

_FIELDS = ("cpu", "mem", "gpu", "pods")
_NAME = operator.attrgetter("name")
_NODE = operator.attrgetter("node")


class NodeArrays:
    """Idle and releasing amounts of every node of a session, by node position."""

    def __init__(self, nodes: list[Node]):
        n = len(nodes)
        self.alloc_cpu = array("d", (x.allocatable.cpu for x in nodes))
        self.alloc_mem = array("d", (x.allocatable.memory for x in nodes))
        self.alloc_gpu = array("d", (x.allocatable.gpu for x in nodes))
        self.idle_cpu = array("d", self.alloc_cpu)
        self.idle_mem = array("d", self.alloc_mem)
        self.idle_gpu = array("d", self.alloc_gpu)
        self.idle_pods = array("d", (float(x.max_pods) for x in nodes))
        self.rel_cpu = array("d", bytes(8 * n))
        self.rel_mem = array("d", bytes(8 * n))
        self.rel_gpu = array("d", bytes(8 * n))
        self.rel_pods = array("d", bytes(8 * n))
        self.idle_scalars = [dict(x.allocatable.scalars) for x in nodes]
        self.rel_scalars: list[dict[str, float]] = [{} for _ in nodes]
        #: Per node, whether its two scalar dicts are this object's own: a copy shares them until one changes.
        self._own = bytearray(b"\x01") * n
        #: Positions of the nodes whose amounts changed since the node classes last looked.
        self.changed: set[int] = set()
        #: Per node, how many times its amounts changed: every change of a node's accounting (its shared
        #: devices included) goes through :meth:`change`, so a plugin may key what it derives from a node on it.
        self.version = [0] * n
        #: How many times any node's amounts changed, so that a sum over every node can be kept while it stays.
        self.changes = 0
        #: The node classes of these amounts, kept with an accounting sessions copy: each session's classes start
        #: from them (:meth:`~kai.framework.nodeclasses.NodeClasses.copy`); a copy has none.
        self.classes: NodeClasses | None = None

    def copy(self) -> NodeArrays:
        """An independent copy of the amounts."""
        other = NodeArrays.__new__(NodeArrays)
        for name, value in vars(self).items():
            if isinstance(value, array):
                setattr(other, name, array("d", value))
        other.idle_scalars, other.rel_scalars = list(self.idle_scalars), list(self.rel_scalars)
        self._own = bytearray(len(self._own))  # shared now: each copies a node's dicts before changing them
        other._own = bytearray(len(self._own))
        other.changed = set(self.changed)
        other.version = list(self.version)
        other.changes = self.changes
        other.classes = None
        return other

    def reset(self, i: int, node: Node) -> None:
        """Node ``i`` becomes ``node`` with nothing on it (a change, as :meth:`change` counts them)."""
        alloc = node.allocatable
        for name, value in (("cpu", alloc.cpu), ("mem", alloc.memory), ("gpu", alloc.gpu)):
            getattr(self, "alloc_" + name)[i] = getattr(self, "idle_" + name)[i] = value
            getattr(self, "rel_" + name)[i] = 0.0
        self.idle_pods[i], self.rel_pods[i] = float(node.max_pods), 0.0
        self.idle_scalars[i], self.rel_scalars[i] = dict(alloc.scalars), {}
        self._own[i] = 1
        self.changed.add(i)
        self.version[i] += 1
        self.changes += 1

    def change(self, i: int, kind: str, res: Resources, sign: float) -> None:
        """Add ``sign * res`` (and one pod slot) to the idle (``kind='idle'``) or releasing amounts of node ``i``."""
        if kind == "idle":
            cpu, mem, gpu, pods = self.idle_cpu, self.idle_mem, self.idle_gpu, self.idle_pods
        else:
            cpu, mem, gpu, pods = self.rel_cpu, self.rel_mem, self.rel_gpu, self.rel_pods
        cpu[i] += sign * res.cpu
        mem[i] += sign * res.memory
        gpu[i] += sign * res.gpu
        pods[i] += sign
        self.changed.add(i)
        self.version[i] += 1
        self.changes += 1
        if res.scalars:
            if not self._own[i]:
                self.idle_scalars[i], self.rel_scalars[i] = dict(self.idle_scalars[i]), dict(self.rel_scalars[i])
                self._own[i] = 1
            scalars = (self.idle_scalars if kind == "idle" else self.rel_scalars)[i]
            for k, v in res.scalars.items():
                scalars[k] = scalars.get(k, 0.0) + sign * v


def place_tasks(nodes: list[Node], jobs: dict[str, Job],
                before: tuple[NodeArrays, list[NodeInfo]] | None = None,
                changes: tuple[set[str], dict[str, Job]] | None = None,
                in_order: Callable[[Collection[str]], list[str]] | None = None) -> tuple[NodeArrays, list[NodeInfo]]:
    """The amounts and views of ``nodes`` with the placed tasks of ``jobs`` (by uid, in order) on them (a placed
    shared-GPU task that names no device is given one of its own, kept on the task).

    ``before`` is an earlier result whose tasks are as they were then, handed over with ``changes``: the jobs
    that are not the very objects it was worked out from (their uids, and those objects). With the same node
    names in the same order it is brought up to date and returned: only the nodes those jobs' tasks were or are
    on, and those whose Node object has other amounts, are accounted again; ``in_order`` puts uids of ``jobs`` in
    their order (by default by a pass over them).
    """
    if before is not None and changes is not None and len(before[1]) == len(nodes) and all(
            map(operator.eq, map(_NAME, before[1]), map(_NAME, nodes))):
        return _follow(nodes, jobs, before, *changes,
                       in_order or (lambda uids: list(filter(set(uids).__contains__, jobs))))
    arrays = NodeArrays(nodes)
    infos = [NodeInfo(n, i, arrays) for i, n in enumerate(nodes)]
    by_name = {n.name: n for n in infos}
    on: dict[str, list[Task]] = {}
    for job in jobs.values():
        _gather(job, by_name, on)
    for name, tasks in on.items():
        info = by_name[name]
        for task in tasks:
            info.add_task(task)
    return arrays, infos


def _gather(job: Job, nodes: Container[str], on: dict[str, list[Task]]) -> None:
    """Adds the placed tasks of ``job`` on ``nodes`` to the lists of ``on``, by node name."""
    for task in job.tasks.values():
        node = task.node
        if task.status in ACTIVE_USED and node is not None and node in nodes:
            if task.request.is_shared_gpu and not task.gpu_groups:
                task.gpu_groups = tuple(str(uuid.uuid4()) for _ in range(task.request.gpu_devices))
            on.setdefault(node, []).append(task)


def _follow(nodes: list[Node], jobs: dict[str, Job], before: tuple[NodeArrays, list[NodeInfo]], changed: set[str],
            replaced: dict[str, Job], in_order: Callable[[Collection[str]], list[str]]
            ) -> tuple[NodeArrays, list[NodeInfo]]:
    """``before`` brought up to date (see :func:`place_tasks`): the nodes a job of ``changed`` had or has a task
    on, or whose amounts changed, get their tasks again, job by job in the order of ``jobs``."""
    arrays, infos = before
    by_name: dict[str, NodeInfo] = dict(zip(map(_NAME, infos), infos))
    now: dict[str, list[Task]] = {}
    for uid in changed:
        if uid in jobs:
            _gather(jobs[uid], by_name, now)
    touched = set(now)
    for job in (replaced[uid] for uid in changed if uid in replaced):
        touched.update(t.node for t in job.tasks.values() if t.status in ACTIVE_USED and t.node in by_name)
    for k in itertools.compress(range(len(infos)), map(operator.is_not, map(_NODE, infos), nodes)):
        info, node = infos[k], nodes[k]
        if not _same_amounts(info.node, node):
            touched.add(info.name)
        info.node = node
    if not touched:
        return before
    again: dict[str, dict[str, list[Task]]] = {}  # node name -> its tasks by job
    for name in touched:
        by_job = again[name] = {}
        for task in by_name[name].tasks.values():
            if task.job not in changed:
                by_job.setdefault(task.job, []).append(task)
        for task in now.get(name, ()):
            by_job.setdefault(task.job, []).append(task)
    there = set().union(*again.values())  # the jobs placed on them, and their order among the jobs
    order = {uid: i for i, uid in enumerate(in_order(there))}
    for name, by_job in again.items():
        info = by_name[name]
        arrays.reset(info.index, info.node)
        info.tasks, info.gpu_groups, info._shared = {}, {}, False
        for uid in sorted(by_job, key=order.__getitem__):
            for task in by_job[uid]:
                info.add_task(task)
    return before


def _same_amounts(was: Node, node: Node) -> bool:
    return was.max_pods == node.max_pods and was.gpu_memory_mib == node.gpu_memory_mib and \
        was.allocatable == node.allocatable


def _mig_gpus(scalars: dict[str, float]) -> float:
    return sum(mig_gpu_slices(k) * v for k, v in scalars.items() if is_mig_resource(k) and v > 0) if scalars else 0.0


class NodeInfo:
    """A node as the session sees it: the Kubernetes node, its position, its tasks and amounts."""

    __slots__ = ("node", "index", "arrays", "tasks", "name", "sort_key", "gpu_groups", "_shared")

    def __init__(self, node: Node, index: int, arrays: NodeArrays):
        self.node = node
        self.name = node.name
        #: Node names are compared as byte strings wherever ties are broken by name.
        self.sort_key = node.name.encode()
        self.index = index
        self.arrays = arrays
        self.tasks: dict[str, Task] = {}
        #: Shared GPU devices by group id (see :mod:`kai.framework.gpusharing`).
        self.gpu_groups: dict[str, GpuGroup] = {}
        #: Whether :attr:`tasks` is shared with a copy (or the node copied): copied before it changes.
        self._shared = False

    def copy(self, arrays: NodeArrays) -> NodeInfo:
        """A copy reading ``arrays`` (a copy of this node's arrays), with its own task and device accounting (the
        tasks shared until either changes them)."""
        other = NodeInfo.__new__(NodeInfo)
        other.node, other.name, other.sort_key, other.index = self.node, self.name, self.sort_key, self.index
        other.arrays = arrays
        other.tasks = self.tasks
        other._shared = self._shared = True
        other.gpu_groups = {gid: group.copy() for gid, group in self.gpu_groups.items()} if self.gpu_groups else {}
        return other

    @property
    def labels(self) -> dict[str, str]:
        return self.node.labels

    def _vector(self, cpu: array[float], mem: array[float], gpu: array[float], scalars: dict[str, float]) -> Resources:
        i = self.index
        return Resources(cpu[i], mem[i], gpu[i], dict(scalars))

    @property
    def idle(self) -> Resources:
        a = self.arrays
        return self._vector(a.idle_cpu, a.idle_mem, a.idle_gpu, a.idle_scalars[self.index])

    @property
    def releasing(self) -> Resources:
        a = self.arrays
        return self._vector(a.rel_cpu, a.rel_mem, a.rel_gpu, a.rel_scalars[self.index])

    @property
    def allocatable(self) -> Resources:
        return self.node.allocatable

    @property
    def non_allocated(self) -> Resources:
        """Idle plus releasing: what a task could use once releasing pods are gone."""
        return self.idle.add(self.releasing)

    @property
    def idle_pods(self) -> float:
        return self.arrays.idle_pods[self.index]

    @property
    def has_gpus(self) -> bool:
        return self.node.allocatable.gpu > 0 or any(
            is_mig_resource(k) for k, v in self.node.allocatable.scalars.items() if v > 0
        )

    def idle_gpu_sum(self) -> float:
        """KAI's idle GPUs of the node: whole devices, MIG slices and the free portions of shared devices."""
        i = self.index
        return self.arrays.idle_gpu[i] + _mig_gpus(self.arrays.idle_scalars[i]) + (
            shared_free_gpus(self) if self.gpu_groups else 0.0)

    def releasing_gpu_sum(self) -> float:
        """KAI's releasing GPUs of the node: whole devices, MIG slices and releasing portions of shared devices."""
        i = self.index
        return self.arrays.rel_gpu[i] + _mig_gpus(self.arrays.rel_scalars[i]) + (
            shared_releasing_gpus(self) if self.gpu_groups else 0.0)

    def used_gpu_portion(self, group: str) -> float:
        """Share of a shared device's memory its tasks use."""
        return used_portion(self, group)

    def fitting_gpu_groups(self, task: Task) -> list[str]:
        """Ids of this node's shared devices the shared-GPU ``task`` fits on (counting releasing memory)."""
        return fitting_groups(self, task.request)

    def scalars_fit(self, task: Task, releasing_too: bool) -> bool:
        """Whether the task's extended resources fit (the arrays cover CPU, memory, GPUs and pods)."""
        wanted = task.request.node_resources().scalars
        if not wanted:
            return True
        idle = self.arrays.idle_scalars[self.index]
        rel = self.arrays.rel_scalars[self.index]
        for k, v in wanted.items():
            have = idle.get(k, 0.0) + (rel.get(k, 0.0) if releasing_too else 0.0)
            if v > have + EPSILON:
                return False
        return True

    # --- accounting: called by the session when a task lands on or leaves this node ----------------

    def add_task(self, task: Task) -> None:
        """Account ``task`` (already carrying its status) on this node."""
        if self._shared:
            self.tasks, self._shared = dict(self.tasks), False
        self.tasks[task.uid] = task
        res = task.request.node_resources()
        if task.status is TaskStatus.PIPELINED:
            self.arrays.change(self.index, "rel", res, -1.0)
        else:
            self.arrays.change(self.index, "idle", res, -1.0)
            if task.status is TaskStatus.RELEASING:
                self.arrays.change(self.index, "rel", res, 1.0)
        if task.gpu_groups and task.request.is_shared_gpu:
            add_shared(self, task.request, task.gpu_groups, task.status)

    def remove_task(self, task: Task) -> None:
        """Undo :meth:`add_task` for ``task`` with the status it has now."""
        if self._shared:
            self.tasks, self._shared = dict(self.tasks), False
        del self.tasks[task.uid]
        res = task.request.node_resources()
        if task.status is TaskStatus.PIPELINED:
            self.arrays.change(self.index, "rel", res, 1.0)
        else:
            self.arrays.change(self.index, "idle", res, 1.0)
            if task.status is TaskStatus.RELEASING:
                self.arrays.change(self.index, "rel", res, -1.0)
        if task.gpu_groups and task.request.is_shared_gpu:
            remove_shared(self, task.request, task.gpu_groups, task.status)

    def __repr__(self) -> str:
        return f"NodeInfo({self.name})"
