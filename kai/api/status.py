"""KAI's pod status model and the status groups the scheduler reasons with."""

from __future__ import annotations

import enum


class TaskStatus(str, enum.Enum):
    """Status of a task (pod) as the scheduler sees it; the values are KAI's names."""

    PENDING = "Pending"
    GATED = "Gated"
    ALLOCATED = "Allocated"
    PIPELINED = "Pipelined"
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    DELETED = "Deleted"
    #: A running pod whose deletion started longer ago than the stuck threshold: it holds its resources
    #: but they are not expected back (nothing is pipelined onto them, it is never a victim).
    STUCK_IN_RELEASING = "StuckInReleasing"

    def __str__(self) -> str:
        return self.value


S = TaskStatus

#: Statuses that occupy resources on a node (and count as "active" for gangs).
ACTIVE_USED = frozenset({S.ALLOCATED, S.PIPELINED, S.BINDING, S.BOUND, S.RUNNING, S.RELEASING, S.STUCK_IN_RELEASING})
#: Active and not on its way out.
ACTIVE_ALLOCATED = frozenset({S.ALLOCATED, S.PIPELINED, S.BINDING, S.BOUND, S.RUNNING})
#: Alive: placed or still waiting to be.
ALIVE = frozenset({S.ALLOCATED, S.PIPELINED, S.BINDING, S.BOUND, S.RUNNING, S.PENDING, S.GATED})
#: Counted as a queue's allocation (Releasing and Pipelined are not).
ALLOCATED = frozenset({S.ALLOCATED, S.BOUND, S.BINDING, S.RUNNING})
