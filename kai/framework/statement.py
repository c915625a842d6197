"""Statement: a transaction of virtual scheduling operations that commits or rolls back.

Each operation (allocate, pipeline, evict) changes the session at once -- task status, node
amounts, plugin state through the allocation events -- and records how to undo itself.
``rollback(checkpoint)`` undoes the operations after a checkpoint in reverse order, ``discard()``
undoes all, so nothing of a rolled-back statement remains in the session. ``commit()`` turns the
operations into the session's decisions: bind requests, pipeline records, evictions.

A task evicted in a statement may be placed again in it (the eviction actions re-place victims):
pipelined back onto its own node it is *un-evicted* (neither decision is committed); pipelined onto
another node it is *moved*: it keeps holding its old node's resources as releasing (the pod still
terminates there) while it reserves the new node's.
"""

from __future__ import annotations

import attrs

from kai.api import Task, TaskStatus


@attrs.define(slots=True)
class Operation:
    kind: str  # allocate | pipeline | evict | unevict
    task: Task
    node: str | None
    prev_status: TaskStatus
    prev_node: str | None
    message: str = ""


@attrs.define(frozen=True)
class Decision:
    """A committed decision, for the driver to carry out: ``bind``, ``pipeline`` or ``evict``."""

    kind: str
    task: Task
    node: str | None
    message: str = ""


class Statement:
    def __init__(self, session):
        self.session = session
        self.ops: list[Operation] = []
        #: Task uid -> the eviction operation of this statement that made it Releasing.
        self._evictions: dict[str, Operation] = {}

    def _do(self, kind: str, task: Task, node: str | None, status: TaskStatus, message: str = "") -> Operation:
        op = Operation(kind, task, node, task.status, task.node, message)
        self.ops.append(op)
        self.session.move_task(task, status, node)
        return op

    def evicted_here(self, task: Task) -> bool:
        """Whether ``task`` is Releasing because this statement evicted it."""
        return task.status is TaskStatus.RELEASING and task.uid in self._evictions

    def _hold_releasing(self, task: Task, node_name: str, sign: float) -> None:
        """Keep (``sign=1``) or give back (``-1``) a moved task's resources as releasing on its old node."""
        node = self.session.node_by_name[node_name]
        res = task.request.node_resources()
        node.arrays.change(node.index, "idle", res, -sign)
        node.arrays.change(node.index, "rel", res, sign)

    def allocate(self, task: Task, node: str) -> None:
        """Place ``task`` on the idle resources of ``node``."""
        self._do("allocate", task, node, TaskStatus.ALLOCATED)

    def pipeline(self, task: Task, node: str) -> None:
        """Reserve the releasing resources of ``node`` for ``task`` (un-evict or move a task evicted here)."""
        eviction = self._evictions.get(task.uid) if self.evicted_here(task) else None
        if eviction is not None and task.node == node:
            self._do("unevict", task, node, eviction.prev_status)
            self.session.evicted.discard(task.uid)
            return
        old = task.node if eviction is not None else None
        self._do("pipeline", task, node, TaskStatus.PIPELINED)
        if old is not None:
            self._hold_releasing(task, old, 1.0)

    def evict(self, task: Task, message: str) -> None:
        """Evict ``task``: it stays on its node as Releasing."""
        self._evictions[task.uid] = self._do("evict", task, task.node, TaskStatus.RELEASING, message)
        self.session.evicted.add(task.uid)

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        while len(self.ops) > checkpoint:
            op = self.ops.pop()
            if op.kind == "pipeline" and op.prev_status is TaskStatus.RELEASING and op.prev_node is not None:
                self._hold_releasing(op.task, op.prev_node, -1.0)
            elif op.kind == "evict" and self._evictions.get(op.task.uid) is op:
                del self._evictions[op.task.uid]
                self.session.evicted.discard(op.task.uid)
            elif op.kind == "unevict":
                self.session.evicted.add(op.task.uid)
            self.session.move_task(op.task, op.prev_status, op.prev_node)

    def discard(self) -> None:
        self.rollback(0)

    def convert_allocated_to_pipelined(self, job_uid: str) -> None:
        """Turn every task of the job allocated in this statement into a pipelined one (no partial gang is bound)."""
        for op in list(self.ops):
            if op.kind == "allocate" and op.task.job == job_uid and op.task.status is TaskStatus.ALLOCATED:
                self.session.move_task(op.task, op.prev_status, op.prev_node)
                self.ops.remove(op)
                self.pipeline(op.task, op.node)

    def commit(self) -> list[Decision]:
        """Hand the operations to the session as decisions; allocated tasks become Binding."""
        decisions: list[Decision | None] = []
        evict_at: dict[str, int] = {}
        for op in self.ops:
            if op.kind == "allocate":
                op.task.status = TaskStatus.BINDING
                decisions.append(Decision("bind", op.task, op.node))
            elif op.kind == "pipeline":
                decisions.append(Decision("pipeline", op.task, op.node))
            elif op.kind == "evict":
                evict_at[op.task.uid] = len(decisions)
                decisions.append(Decision("evict", op.task, op.prev_node, op.message))
            elif op.task.uid in evict_at:  # un-evicted: the eviction is not carried out
                decisions[evict_at.pop(op.task.uid)] = None
        self.ops = []
        self._evictions = {}
        decisions = [d for d in decisions if d is not None]
        self.session.record(decisions)
        return decisions
