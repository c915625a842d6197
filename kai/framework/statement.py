"""Statement: a transaction of virtual scheduling operations that commits or rolls back.

Each operation (allocate, pipeline, evict) changes the session at once -- task status, node
amounts, plugin state through the allocation events -- and records how to undo itself.
``rollback(checkpoint)`` undoes the operations after a checkpoint in reverse order, ``discard()``
undoes all, so nothing of a rolled-back statement remains in the session. ``commit()`` turns the
operations into the session's decisions: bind requests, pipeline records, evictions.
"""

from __future__ import annotations

import attrs

from kai.api import Task, TaskStatus


@attrs.define(slots=True)
class Operation:
    kind: str  # allocate | pipeline | evict
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

    def _do(self, kind: str, task: Task, node: str | None, status: TaskStatus, message: str = "") -> None:
        self.ops.append(Operation(kind, task, node, task.status, task.node, message))
        self.session.move_task(task, status, node)

    def allocate(self, task: Task, node: str) -> None:
        """Place ``task`` on the idle resources of ``node``."""
        self._do("allocate", task, node, TaskStatus.ALLOCATED)

    def pipeline(self, task: Task, node: str) -> None:
        """Reserve the releasing resources of ``node`` for ``task``."""
        self._do("pipeline", task, node, TaskStatus.PIPELINED)

    def evict(self, task: Task, message: str) -> None:
        """Evict ``task``: it stays on its node as Releasing."""
        self._do("evict", task, task.node, TaskStatus.RELEASING, message)

    def checkpoint(self) -> int:
        return len(self.ops)

    def rollback(self, checkpoint: int) -> None:
        while len(self.ops) > checkpoint:
            op = self.ops.pop()
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
        decisions = []
        for op in self.ops:
            if op.kind == "allocate":
                op.task.status = TaskStatus.BINDING
                decisions.append(Decision("bind", op.task, op.node))
            elif op.kind == "pipeline":
                decisions.append(Decision("pipeline", op.task, op.node))
            else:
                decisions.append(Decision("evict", op.task, op.prev_node, op.message))
        self.ops = []
        self.session.record(decisions)
        return decisions
