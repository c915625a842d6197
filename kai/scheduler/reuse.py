"""Domain objects kept from one cycle's snapshot to the next.

A session changes its snapshot's tasks and jobs and journals what it changed, and
:meth:`~kai.framework.Snapshot.rewind` puts them back (:mod:`kai.framework.journal`). So the cache keeps
its last cycle and what each of its objects was built from, one :class:`~kai.scheduler.generation.Generation`
per kind of object, and each phase of a build (:mod:`kai.scheduler.build`) takes over what it would build from
the very same objects:

* when nothing the cache reads has changed -- no informer's store, the same assumed writes, the same
  settings, and no running pod being deleted has turned stuck in releasing meanwhile -- the last cycle is
  served again: the next session rewinds its snapshot and keeps the node accounting and the plugins'
  memo of the sessions before;
* otherwise the last snapshot is rewound and a task is taken again when its pod view is the very object
  it was built from (the informer keeps the stored object when a new version changes nothing it keeps)
  and its job, status, node, shared GPU devices and NUMA zones are the same -- a pod with ResourceClaims
  or an implicit claim is always built afresh, its request depends on the DRA objects -- and a job when
  its PodGroup view, its priority and the topologies are the same and every one of its tasks was taken
  again, in the same order -- a pod whose task depended on its view and BindRequest alone, both those of
  the last cycle, is taken again without working its status out (:attr:`Reuse.settled`). A node is taken
  again when its view is the very object and what pods outside the jobs hold on it is the same
  (:attr:`Reuse.nodes`); queues are built afresh, and the new snapshot follows the last one
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
from typing import TYPE_CHECKING

from kai.api import ACTIVE_USED, HostPort, Job, Node, NumaTopology, Resources, Task, TaskStatus, ZonePlacement
from kai.scheduler.bindrequests import LiveBindRequests
from kai.scheduler.generation import Built, Generation
from kai.scheduler.views import BindRequestView, PodView

if TYPE_CHECKING:
    from kai.scheduler.build import Context, Cycle, CycleInputs
    from kai.scheduler.cache import Assumptions

#: What a node's ``Node`` is built from besides its view: what pods outside the jobs hold on it (resources and
#: pod count), their host ports, and its NUMA topology.
NodeInputs = tuple[tuple[Resources, int] | None, tuple[HostPort, ...], NumaTopology | None]
#: What a job is built from besides its PodGroup view: its priority and the topologies' change count.
JobInputs = tuple[int, int]
#: What a task is built from besides its pod view: its job's uid, its status and node, the shared GPU devices and
#: NUMA zones its BindRequest or an assumed binding gives it.
TaskInputs = tuple[str, TaskStatus, str | None, tuple[str, ...], tuple[ZonePlacement, ...]]
#: The (node, shared GPU device) pairs a task holds.
Shared = tuple[tuple[str, str], ...]


class Reuse:
    """The last cycle, what it was built from, and what each phase built, by node name, PodGroup key or pod key."""

    __slots__ = ("cycle", "inputs", "until", "pods", "binds", "assumed", "context", "bind_requests", "nodes",
                 "jobs", "tasks", "settled", "views", "members", "shared", "claims", "redone", "unsettled",
                 "order", "node_order", "node_index", "node_list", "held")

    def __init__(self) -> None:
        self.cycle: Cycle | None = None
        #: What the whole cycle was built from (store changes, settings).
        self.inputs: CycleInputs | None = None
        #: When a task status of the cycle changes by time alone (a deleting pod turning stuck in releasing).
        self.until = math.inf
        #: Every pod and the live BindRequests by pod key, and the assumed writes, as the cycle read them.
        self.pods: dict[str, PodView] = {}
        self.binds: dict[str, BindRequestView] = {}
        self.assumed: Assumptions = ({}, set())
        #: What the jobs are built against besides their PodGroups and pods (priority classes, topologies ...).
        self.context: Context | None = None
        #: Which BindRequests are live, worked out again only for those that can have changed.
        self.bind_requests = LiveBindRequests()
        #: The nodes by name, jobs by PodGroup key and tasks by pod key, each with what it was built from.
        self.nodes: Built[str, NodeInputs, Node] = Built()
        self.jobs: Built[str, JobInputs, Job] = Built()
        self.tasks: Built[str, TaskInputs, Task] = Built()
        #: The inputs of the tasks of the pods settled: those whose task depends on their view and their live
        #: BindRequest (or None) alone -- not being deleted, no assumed write, no claim, no NUMA problem and no
        #: allocation carried by the BindRequest -- by pod key.
        self.settled: Built[str, tuple[BindRequestView | None], TaskInputs] = Built()
        #: The pod views of jobs' tasks, each job's pod keys in the order of the store, the shared GPU devices a
        #: pod's task holds on its node, and the pods with volume claims.
        self.views: Generation[str, PodView] = Generation()
        self.members: Generation[str, list[str]] = Generation()
        self.shared: Generation[str, Shared] = Generation()
        self.claims: Generation[str, PodView] = Generation()
        #: The keys of the pods the cycle being built works out (None: all of them), and of the last cycle's pods
        #: that were not settled.
        self.redone: set[str] | None = None
        self.unsettled: set[str] = set()
        #: The last cycle's jobs by PodGroup key, in the store's order.
        self.order: dict[str, Job] = {}
        #: The last cycle's node names in order, the position of each, its nodes, and the names of those that pods
        #: outside the jobs, host ports or a NUMA topology were on.
        self.node_order: list[str] = []
        self.node_index: dict[str, int] = {}
        self.node_list: list[Node] = []
        self.held: set[str] = set()

    def same_cycle(self, assumed: Assumptions, now: float) -> Cycle | None:
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
        self.until = math.inf

    def redo(self, pods: dict[str, PodView], touched: set[str], groups_touched: set[str], assumed: Assumptions,
             context: Context) -> tuple[set[str] | None, set[str] | None]:
        """The keys of the pods to work out in this cycle and of the PodGroups whose jobs gather their tasks
        again (None and None: all of them); what the other pods and jobs had in the last cycle is carried over.
        ``pods`` are the cycle's, ``touched`` the keys of the pods changed since the last cycle or whose live
        BindRequest changed, ``groups_touched`` the PodGroup keys changed, ``assumed`` the cycle's assumed
        writes (bound by pod key, evicted keys)."""
        same = self.cycle is not None and context == self.context
        self.context = context
        self.redone = None
        if not same:
            return None, None
        redo = self.unsettled | touched  # not settled: worked out every cycle; a pod new or gone is touched
        for bound, evicted in (assumed, self.assumed):
            redo.update(bound)
            redo |= evicted
        affected = set(groups_touched)
        for key in redo:  # the job the pod was a task of, and the one it names now
            for pod in (self.views.previous.get(key), pods.get(key)):
                if pod is not None:
                    affected.add(f"{pod.namespace}/{pod.pod_group}")
        for job in affected:
            redo.update(self.members.previous.get(job, ()))
        for generation in (self.tasks, self.settled, self.views, self.shared, self.claims):
            generation.carry(redo)
        self.members.carry(affected)
        self.jobs.carry(affected)
        self.redone = redo
        return redo, affected

    def member(self, job: str, pod: PodView, task: Task) -> None:
        """``pod`` (its ``task``) is a member of ``job`` in the cycle being built."""
        self.views.current[pod.key] = pod
        self.members.current.setdefault(job, []).append(pod.key)
        if task.gpu_groups and task.node and task.status in ACTIVE_USED:
            self.shared.current[pod.key] = tuple((task.node, group) for group in task.gpu_groups)
        if pod.claims:
            self.claims.current[pod.key] = pod

    def shared_in_use(self) -> set[tuple[str, str]]:
        """The (node, shared GPU device) pairs held by the jobs' tasks of the cycle being built."""
        return {pair for pairs in self.shared.current.values() for pair in pairs}

    def claims_wanted(self) -> bool:
        """Whether a pod of the jobs of the cycle being built has volume claims."""
        return bool(self.claims.current)

    def turn(self, cycle: Cycle, inputs: CycleInputs, pods: dict[str, PodView], binds: dict[str, BindRequestView],
             assumed: Assumptions, jobs: dict[str, Job]) -> None:
        """Remember ``cycle``, what it was built from and its ``jobs`` by PodGroup key; what each phase built is the
        last cycle's now."""
        self.cycle, self.inputs, self.pods, self.binds, self.assumed = cycle, inputs, pods, binds, assumed
        self.order = jobs
        settled = self.settled.current
        self.unsettled = (pods.keys() - settled.keys() if self.redone is None
                          else {key for key in self.redone if key in pods and key not in settled})
        for generation in (self.bind_requests.live, self.nodes, self.jobs, self.tasks, self.settled, self.views,
                           self.members, self.shared, self.claims):
            generation.turn()
