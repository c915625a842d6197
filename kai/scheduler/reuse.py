"""Domain objects kept from one cycle's snapshot to the next.

A session changes its snapshot's tasks and jobs and journals what it changed, and
:meth:`~kai.framework.Snapshot.rewind` puts them back (:mod:`kai.framework.journal`). So the cache keeps
its last cycle and what each of its objects was built from:

* when nothing the cache reads has changed -- no informer's store, the same assumed writes, the same
  settings, and no running pod being deleted has turned stuck in releasing meanwhile -- the last cycle is
  served again: the next session rewinds its snapshot and keeps the node accounting and the plugins'
  memo of the sessions before;
* otherwise the last snapshot is rewound and a task is taken again when its pod view is the very object
  it was built from (the informer keeps the stored object when a new version changes nothing it keeps)
  and its job, status, node, shared GPU devices and NUMA zones are the same -- a pod with ResourceClaims
  or an implicit claim is always built afresh, its request depends on the DRA objects -- and a job when
  its PodGroup view, its priority and the topologies are the same and every one of its tasks was taken
  again, in the same order -- a pod whose task depended on its view and BindRequest alone, both the very
  objects of the last cycle, is taken again without working its status out (:meth:`Reuse.settled`). Nodes
  and queues are built afresh, and the new snapshot follows the last one
  (:meth:`~kai.framework.Snapshot.follow`): what the kernel and the plugins worked out for the nodes and jobs
  that did not change is taken over.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

from kai.api import Job, Task

if TYPE_CHECKING:
    from kai.scheduler.cache import Cycle


class Reuse:
    """The last cycle, the inputs it was built from and its tasks and jobs by pod and PodGroup key."""

    __slots__ = ("cycle", "inputs", "until", "pods", "binds", "assumed", "tasks", "jobs", "_tasks", "_jobs",
                 "_settled", "_settling")

    def __init__(self) -> None:
        self.cycle: Cycle | None = None
        #: What the whole cycle was built from (store changes, settings).
        self.inputs: tuple = ()
        #: When a task status of the cycle changes by time alone (a deleting pod turning stuck in releasing).
        self.until = math.inf
        #: Every pod and the live BindRequests by pod key, and the assumed writes, as the cycle read them.
        self.pods: dict = {}
        self.binds: dict = {}
        self.assumed: tuple = ()
        #: Pod key -> (pod view, the other inputs, task) of the cycle being built; PodGroup key -> (view, inputs, job).
        self.tasks: dict[str, tuple[Any, tuple, Task]] = {}
        self.jobs: dict[str, tuple[Any, tuple, Job]] = {}
        self._tasks: dict[str, tuple[Any, tuple, Task]] = {}
        self._jobs: dict[str, tuple[Any, tuple, Job]] = {}
        #: Pod key -> (its BindRequest view or None, its entry in :attr:`tasks`) of the pods settled in the last
        #: cycle and in the cycle being built (:meth:`settle`).
        self._settled: dict[str, tuple[Any, tuple[Any, tuple, Task]]] = {}
        self._settling: dict[str, tuple[Any, tuple[Any, tuple, Task]]] = {}

    def same_cycle(self, assumed: tuple, now: float) -> Cycle | None:
        """The last cycle when it was built from the same inputs (the caller's check) and ``assumed`` and still
        holds at ``now``."""
        if self.cycle is None or assumed != self.assumed or now >= self.until:
            return None
        self.cycle.snapshot.now = now
        return self.cycle

    def start(self) -> None:
        """Begin a new cycle: the last snapshot is rewound so that its objects are as they were built."""
        if self.cycle is not None:
            self.cycle.snapshot.rewind()
        self._tasks, self._jobs = self.tasks, self.jobs
        self.tasks, self.jobs = {}, {}
        self._settled, self._settling = self._settling, {}
        self.until = math.inf

    def task(self, key: str, view: Any, inputs: tuple) -> Task | None:
        """The last cycle's task of pod ``key`` when it was built from ``view`` (this very object) and ``inputs``."""
        kept = self._tasks.get(key)
        return kept[2] if kept is not None and kept[0] is view and kept[1] == inputs else None

    def settle(self, key: str, bind: Any, entry: tuple[Any, tuple, Task]) -> None:
        """The task of pod ``key`` (``entry`` of :attr:`tasks`) depends on its pod view and ``bind`` (its live
        BindRequest view or None) alone: it is not being deleted, has no assumed write, no claim, no NUMA
        problem and no allocation carried by its BindRequest."""
        self._settling[key] = (bind, entry)

    def settled(self, key: str, view: Any, bind: Any) -> tuple[Any, tuple, Task] | None:
        """The entry of pod ``key`` settled in the last cycle when its view and BindRequest are the very same."""
        kept = self._settled.get(key)
        return kept[1] if kept is not None and kept[0] is bind and kept[1][0] is view else None

    def job(self, key: str, view: Any, inputs: tuple) -> Job | None:
        """The last cycle's job of PodGroup ``key`` when it was built from ``view`` and ``inputs``; its tasks
        are the caller's to compare (:meth:`same_tasks`)."""
        kept = self._jobs.get(key)
        return kept[2] if kept is not None and kept[0] is view and kept[1] == inputs else None

    @staticmethod
    def same_tasks(job: Job, tasks: list[Task]) -> bool:
        """Whether ``job`` holds exactly ``tasks``, these very objects, in this order."""
        return len(job.tasks) == len(tasks) and all(map(operator.is_, job.tasks.values(), tasks))

    def keep(self, cycle: Cycle, inputs: tuple, pods: dict, binds: dict, assumed: tuple) -> None:
        """Remember ``cycle`` and what it was built from; the objects not kept are dropped."""
        self.cycle, self.inputs, self.pods, self.binds, self.assumed = cycle, inputs, pods, binds, assumed
        self._tasks, self._jobs, self._settled = {}, {}, {}
