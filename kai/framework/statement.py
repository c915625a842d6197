"""Statement: a transaction of virtual scheduling operations that commits or rolls back.

Each operation (allocate, pipeline, evict) changes the session at once -- task status, node
amounts, plugin state through the allocation events -- and records how to undo itself.
``rollback(checkpoint)`` undoes the operations after a checkpoint in reverse order, ``discard()``
undoes all, so nothing of a rolled-back statement remains in the session. ``commit()`` turns the
operations into the session's decisions: bind requests, pipeline records, evictions. A statement
with operations is listed in the session's ``open_statements`` until it commits or is discarded, so
that a step that raises can be undone (``abandon()``) by the session's fault containment.

A task evicted in a statement may be placed again in it (the eviction actions re-place victims):
pipelined back onto its own node it is *un-evicted* (neither decision is committed); pipelined onto
another node it is *moved*: it keeps holding its old node's resources as releasing (the pod still
terminates there) while it reserves the new node's.

A shared-GPU task placed by a statement gets its device groups chosen on the node (unless the caller
names them); its decision carries them for the binder. A task newly placed has its NUMA placement
cleared for a plugin to choose in ``kai_on_allocate``; its decision carries it, and a rollback
restores the task's previous one.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, cast

import attrs

from kai.api import Task, TaskStatus, ZonePlacement
from kai.framework import gpusharing
from kai.framework.faults import SessionCorrupted, describe

if TYPE_CHECKING:
    from kai.framework.nodes import NodeInfo
    from kai.framework.session import Session


@attrs.define(slots=True)
class Operation:
    kind: str  # allocate | pipeline | evict | unevict | unpipeline
    task: Task
    node: str | None
    prev_status: TaskStatus
    prev_node: str | None
    message: str = ""
    prev_groups: tuple[str, ...] = ()
    prev_numa: tuple[ZonePlacement, ...] | None = ()


@attrs.define(frozen=True)
class Decision:
    """A committed decision, for the driver to carry out: ``bind``, ``pipeline`` or ``evict``.

    ``gpu_groups`` names the shared GPU devices (group ids scoped to the node) of a shared-GPU task;
    a group the node does not have yet needs a new reservation pod. ``numa_zones`` is the NUMA placement
    chosen for the task (empty when none was), recorded on its BindRequest.
    """

    kind: str
    task: Task
    node: str | None
    message: str = ""
    gpu_groups: tuple[str, ...] = ()
    numa_zones: tuple[ZonePlacement, ...] = ()


class Statement:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.ops: list[Operation] = []
        #: Task uid -> the eviction operation of this statement that made it Releasing.
        self._evictions: dict[str, Operation] = {}
        #: Listed in the session's open statements (from the first operation until commit or discard).
        self._open = False

    def _do(self, kind: str, task: Task, node: str | None, status: TaskStatus, message: str = "",
            groups: tuple[str, ...] | None = None) -> Operation:
        if not self._open:
            self.session.open_statements.append(self)
            self._open = True
        if id(task) not in self.session.journal.tasks:
            self.session.keep(task)
        op = Operation(kind, task, node, task.status, task.node, message, task.gpu_groups, task.numa_placement)
        self.ops.append(op)
        if kind in ("allocate", "pipeline"):
            task.numa_placement = None  # a new placement: chosen by a plugin when the task is placed
        self.session.move_task(task, status, node, groups)
        return op

    def _close(self) -> None:
        if self._open:
            self.session.open_statements.remove(self)
            self._open = False

    def _groups(self, task: Task, node: str, groups: tuple[str, ...] | None,
                pipeline: bool) -> tuple[str, ...] | None:
        """The device groups of a shared-GPU task placed on ``node``: the given ones, or chosen there."""
        if groups is not None or not task.request.is_shared_gpu:
            return groups
        choice = self.session.choose_gpu_groups(task, self.session.node_by_name[node], not pipeline, pipeline)
        if choice is None:
            raise ValueError(f"task {task.uid} does not fit the shared GPUs of node {node}")
        return choice[0]

    def evicted_here(self, task: Task) -> bool:
        """Whether ``task`` is Releasing because this statement evicted it."""
        return task.status is TaskStatus.RELEASING and task.uid in self._evictions

    def _hold_releasing(self, task: Task, node_name: str, groups: tuple[str, ...], sign: float) -> None:
        """Keep (``sign=1``) or give back (``-1``) a moved task's resources as releasing on its old node
        (its shared GPU devices ``groups`` included)."""
        node = self.session.node_by_name[node_name]
        res = task.request.node_resources()
        node.arrays.change(node.index, "idle", res, -sign)
        node.arrays.change(node.index, "rel", res, sign)
        if groups and task.request.is_shared_gpu:
            account = gpusharing.add_shared if sign > 0 else gpusharing.remove_shared
            account(node, task.request, groups, TaskStatus.RELEASING)

    def allocate(self, task: Task, node: str, gpu_groups: tuple[str, ...] | None = None) -> None:
        """Place ``task`` on the idle resources of ``node`` (on ``gpu_groups``, or devices chosen there)."""
        self._do("allocate", task, node, TaskStatus.ALLOCATED, groups=self._groups(task, node, gpu_groups, False))

    def pipeline(self, task: Task, node: str, gpu_groups: tuple[str, ...] | None = None) -> None:
        """Reserve the releasing resources of ``node`` for ``task`` (on ``gpu_groups``, or devices chosen
        there); un-evict or move a task evicted here."""
        eviction = self._evictions.get(task.uid) if self.evicted_here(task) else None
        groups = self._groups(task, node, gpu_groups, True)
        if eviction is not None and task.node == node and not self._other_devices(task, groups):
            self._do("unevict", task, node, eviction.prev_status)
            self.session.evicted.discard(task.uid)
            return
        old, old_groups = (task.node, task.gpu_groups) if eviction is not None else (None, ())
        self._do("pipeline", task, node, TaskStatus.PIPELINED, groups=groups)
        if old is not None:
            self._hold_releasing(task, old, old_groups, 1.0)

    def _other_devices(self, task: Task, groups: Collection[str] | None) -> bool:
        """Whether ``groups`` moves a shared task to devices of its node other than its own: ones in use, or
        a new one while a device of its own is still held by tasks that are not releasing (a new device
        stands for its own only when all of its own is releasing; else its freed share may be taken)."""
        if not groups:
            return False
        in_use = self.session.node_by_name[task.node].gpu_groups
        moved = [g for g in groups if g not in task.gpu_groups]
        if any(g in in_use for g in moved):
            return True
        return bool(moved) and any((own := in_use.get(g)) is not None and own.used != own.releasing
                                   for g in task.gpu_groups)

    def place(self, task: Task, node: NodeInfo, fits_idle: bool, pipeline_only: bool) -> str | None:
        """Allocate ``task`` on ``node`` (a NodeInfo) when it fits idle resources, else pipeline it; return which.

        A shared-GPU task gets its devices here and is pipelined when a chosen device is not free now;
        None (nothing done) when too few of the node's devices fit it.
        """
        pipelined = pipeline_only or not fits_idle
        groups = None
        if task.request.is_shared_gpu:
            choice = self.session.choose_gpu_groups(task, node, fits_idle, pipeline_only)
            if choice is None:
                return None
            groups, pipelined = choice
        if pipelined:
            self.pipeline(task, node.name, groups)
            return "pipeline"
        self.allocate(task, node.name, groups)
        return "allocate"

    def evict(self, task: Task, message: str) -> None:
        """Evict ``task``: it stays on its node as Releasing. A pipelined task holds nothing yet: it gives
        its reservation back and is pending again (its nomination is withdrawn, no pod is evicted)."""
        if task.status is TaskStatus.PIPELINED:
            self._do("unpipeline", task, None, TaskStatus.PENDING, message, groups=())
            return
        self._evictions[task.uid] = self._do("evict", task, task.node, TaskStatus.RELEASING, message)
        self.session.evicted.add(task.uid)

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        while len(self.ops) > checkpoint:
            op = self.ops.pop()
            if op.kind == "pipeline" and op.prev_status is TaskStatus.RELEASING and op.prev_node is not None:
                self._hold_releasing(op.task, op.prev_node, op.prev_groups, -1.0)
            elif op.kind == "evict" and self._evictions.get(op.task.uid) is op:
                del self._evictions[op.task.uid]
                self.session.evicted.discard(op.task.uid)
            elif op.kind == "unevict":
                self.session.evicted.add(op.task.uid)
            self.session.move_task(op.task, op.prev_status, op.prev_node, op.prev_groups)
            op.task.numa_placement = op.prev_numa

    def discard(self) -> None:
        self.rollback(0)
        self._close()

    def abandon(self) -> list[Exception]:
        """Discard after a failure: undo every operation even when a plugin raises in an allocation event
        on the way, and return those exceptions. Raises :class:`SessionCorrupted` when an operation could
        not be undone (the task is not back where it was)."""
        errors: list[Exception] = []
        while self.ops:
            op = self.ops[-1]
            try:
                self.rollback(len(self.ops) - 1)
            except Exception as exc:  # noqa: BLE001 - the state is checked below
                if (op.task.status, op.task.node) != (op.prev_status, op.prev_node):
                    raise SessionCorrupted(f"could not undo {op.kind} of task {op.task.uid}: {describe(exc)}") from exc
                errors.append(exc)
        self._evictions = {}
        self._close()
        return errors

    def convert_allocated_to_pipelined(self, job_uid: str) -> None:
        """Turn every task of the job allocated in this statement into a pipelined one (no partial gang is bound)."""
        for op in list(self.ops):
            if op.kind == "allocate" and op.task.job == job_uid and op.task.status is TaskStatus.ALLOCATED:
                groups = op.task.gpu_groups
                self.session.move_task(op.task, op.prev_status, op.prev_node, op.prev_groups)
                op.task.numa_placement = op.prev_numa
                self.ops.remove(op)
                # An allocation always names its node.
                self.pipeline(op.task, cast(str, op.node), groups if op.task.request.is_shared_gpu else None)

    def commit(self) -> list[Decision]:
        """Hand the operations to the session as decisions; allocated tasks become Binding."""
        decisions: list[Decision | None] = []
        evict_at: dict[str, int] = {}
        for op in self.ops:
            if op.kind == "allocate":
                op.task.status = TaskStatus.BINDING
                decisions.append(Decision("bind", op.task, op.node, gpu_groups=op.task.gpu_groups,
                                          numa_zones=op.task.numa_placement or ()))
            elif op.kind == "pipeline":
                decisions.append(Decision("pipeline", op.task, op.node, gpu_groups=op.task.gpu_groups,
                                          numa_zones=op.task.numa_placement or ()))
            elif op.kind == "evict":
                evict_at[op.task.uid] = len(decisions)
                decisions.append(Decision("evict", op.task, op.prev_node, op.message))
            elif op.kind == "unpipeline":
                decisions = [d for d in decisions if d is None or d.task is not op.task]
                self.session.withdraw(op.task)
            elif op.task.uid in evict_at:  # un-evicted: the eviction is not carried out
                decisions[evict_at.pop(op.task.uid)] = None
        self.ops = []
        self._evictions = {}
        self._close()
        committed = [d for d in decisions if d is not None]
        self.session.record(committed)
        return committed
