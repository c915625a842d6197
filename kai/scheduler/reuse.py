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
  objects of the last cycle, is taken again without working its status out (:meth:`Reuse.settled`). A node
  is taken again when its view is the very object and what pods outside the jobs hold on it is the same
  (:meth:`Reuse.node`); queues are built afresh, and the new snapshot follows the last one
  (:meth:`~kai.framework.Snapshot.follow`): what the kernel and the plugins worked out for the nodes and jobs
  that did not change is taken over;
* the informers say which keys changed since the last cycle (:meth:`~kai.kube.watch.Informer.take`), so
  a cycle goes only over the pods that can have changed (:meth:`Reuse.redo`): those changed or gone, whose
  live BindRequest or assumed write changed, those not settled in the last cycle (not of a job, being
  deleted, with claims ...), and every pod of a job one of them belonged to or belongs to now, or whose
  PodGroup changed. Every other job is taken over whole, with its settled pods, unless the priority
  classes, the topologies or the cache's settings changed (then every pod is gone over).
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

from kai.api import ACTIVE_USED, Job, Node, Task
from kai.scheduler import convert

if TYPE_CHECKING:
    from kai.scheduler.cache import Cycle


class Reuse:
    """The last cycle, the inputs it was built from and its tasks and jobs by pod and PodGroup key."""

    __slots__ = ("cycle", "inputs", "until", "pods", "binds", "assumed", "tasks", "jobs", "_tasks", "_jobs",
                 "_settled", "_settling", "context", "kept_pods", "_kept_pods", "_members", "_last_members",
                 "_shared", "_last_shared", "_claims", "_last_claims", "nodes", "_nodes")

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
        #: What the jobs are built against besides their PodGroups and pods (priority classes, topologies ...).
        self.context: tuple | None = None
        #: Of the cycle being built (and of the last): the pod views of jobs' tasks, each job's pod keys in the
        #: order of the store, the shared GPU devices a pod's task holds on its node, the pods with volume claims.
        self.kept_pods: dict[str, Any] = {}
        self._kept_pods: dict[str, Any] = {}
        self._members: dict[str, list[str]] = {}
        self._last_members: dict[str, list[str]] = {}
        self._shared: dict[str, tuple[tuple[str, str], ...]] = {}
        self._last_shared: dict[str, tuple[tuple[str, str], ...]] = {}
        self._claims: set[str] = set()
        self._last_claims: set[str] = set()
        #: Node name -> (node view, the other inputs, Node) of the cycle being built and of the last.
        self.nodes: dict[str, tuple[Any, tuple, Node]] = {}
        self._nodes: dict[str, tuple[Any, tuple, Node]] = {}

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
        self._kept_pods, self.kept_pods = self.kept_pods, {}
        self._last_members, self._members = self._members, {}
        self._last_shared, self._shared = self._shared, {}
        self._last_claims, self._claims = self._claims, set()
        self._nodes, self.nodes = self.nodes, {}
        self.until = math.inf

    def redo(self, pods: dict, touched: set[str], groups_touched: set[str], assumed: tuple,
             context: tuple) -> tuple[set[str] | None, set[str] | None]:
        """The keys of the pods to work out in this cycle and of the PodGroups whose jobs gather their tasks
        again (None and None: all of them); what the other pods and jobs had in the last cycle is taken over.
        ``pods`` are the cycle's, ``touched`` the keys of the pods changed since the last cycle or whose live
        BindRequest changed, ``groups_touched`` the PodGroup keys changed, ``assumed`` the cycle's assumed
        writes (bound by pod key, evicted keys)."""
        same = self.cycle is not None and context == self.context
        self.context = context
        if not same:
            return None, None
        redo = pods.keys() - self._settled.keys()  # not settled: worked out every cycle
        redo |= touched
        for bound, evicted in (assumed, self.assumed):
            redo.update(bound)
            redo |= evicted
        affected = set(groups_touched)
        for key in redo:  # the job the pod was a task of, and the one it names now
            for pod in (self._kept_pods.get(key), pods.get(key)):
                if pod is not None:
                    affected.add(f"{pod.namespace}/{pod.pod_group}")
        for job in affected:
            redo.update(self._last_members.get(job, ()))
        self.tasks, self._settling = _without(self._tasks, redo), _without(self._settled, redo)
        self.kept_pods, self._shared = _without(self._kept_pods, redo), _without(self._last_shared, redo)
        self._claims = self._last_claims - redo
        self._members = _without(self._last_members, affected)
        self.jobs = _without(self._jobs, affected)
        return redo, affected

    def node(self, view: Any, used: tuple | None, host_ports: tuple, numa: Any) -> Node:
        """The Node of ``view`` less ``used`` (what pods outside the jobs hold: resources and pod count) and
        ``host_ports``, with ``numa``: the last cycle's very object when built from the same (sessions do not
        change nodes), so what follows can tell the nodes that did not change by identity."""
        inputs = (used, host_ports, numa)
        kept = self._nodes.get(view.name)
        if kept is not None and kept[0] is view and kept[1] == inputs:
            node = kept[2]
        else:
            node = convert.to_node(view, *(used or (None, 0)), host_ports, numa=numa)
        self.nodes[view.name] = (view, inputs, node)
        return node

    def member(self, job: str, pod: Any, task: Task) -> None:
        """``pod`` (its ``task``) is a member of ``job`` in the cycle being built."""
        self.kept_pods[pod.key] = pod
        self._members.setdefault(job, []).append(pod.key)
        if task.gpu_groups and task.node and task.status in ACTIVE_USED:
            self._shared[pod.key] = tuple((task.node, group) for group in task.gpu_groups)
        if pod.claims:
            self._claims.add(pod.key)

    def shared_in_use(self) -> set[tuple[str, str]]:
        """The (node, shared GPU device) pairs held by the jobs' tasks of the cycle being built."""
        return {pair for pairs in self._shared.values() for pair in pairs}

    def claims_wanted(self) -> bool:
        """Whether a pod of the jobs of the cycle being built has volume claims."""
        return bool(self._claims)

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

    def taken_again(self, key: str, job: Job) -> bool:
        """Whether ``job`` is the last cycle's job of PodGroup ``key`` (:meth:`job`)."""
        kept = self._jobs.get(key)
        return kept is not None and kept[2] is job

    @staticmethod
    def same_tasks(job: Job, tasks: list[Task]) -> bool:
        """Whether ``job`` holds exactly ``tasks``, these very objects, in this order."""
        return len(job.tasks) == len(tasks) and all(map(operator.is_, job.tasks.values(), tasks))

    def keep(self, cycle: Cycle, inputs: tuple, pods: dict, binds: dict, assumed: tuple) -> None:
        """Remember ``cycle`` and what it was built from; the objects not kept are dropped."""
        self.cycle, self.inputs, self.pods, self.binds, self.assumed = cycle, inputs, pods, binds, assumed
        self._tasks, self._jobs, self._settled = {}, {}, {}
        self._kept_pods, self._last_members, self._last_shared, self._last_claims = {}, {}, {}, set()
        self._nodes = {}


def _without(entries: dict, keys: set[str]) -> dict:
    """A copy of ``entries`` without ``keys``."""
    kept = dict(entries)
    for key in keys & entries.keys():
        del kept[key]
    return kept
