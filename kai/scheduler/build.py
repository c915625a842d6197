"""One cycle's build of the scheduler's snapshot from the informers' stores, in the phases of KAI's
``ClusterInfo.Snapshot``: nodes, BindRequests, PodGroups, pods -> tasks, reservations, and the snapshot with the
queues and topologies (:meth:`Build.run`).

Each phase takes over what the last cycle built from the very same objects by one rule, stated in its
docstring, through the generations the cache keeps (:mod:`kai.scheduler.reuse`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import attrs

from kai.api import ACTIVE_USED, HostPort, Job, NumaTopology, Resources, Task, TaskStatus, ZonePlacement, names
from kai.api.dra import EXTENDED_ENTRY, Allocation, DynamicResources, ExtendedClaim, PodResourceClaim, ResourceClaim
from kai.api.storage import Storage
from kai.framework import Problem, Snapshot, build_snapshot
from kai.framework.snapshot import NODE_NOT_FOUND, project_level_queues
from kai.kube import dra
from kai.kube.views import DEFAULT_PRIORITY, PodGroupView, job_priority
from kai.scheduler import convert
from kai.scheduler.reuse import JobInputs, Reuse, TaskInputs
from kai.scheduler.views import BindRequestView, NodeView, PodView

if TYPE_CHECKING:
    from kai.kube.watch import Informer
    from kai.scheduler.cache import Assumptions, ClusterCache

#: What a whole cycle is built from: each informer's count of changes, and the cache's settings (restricted node
#: scheduling, full hierarchy fairness, the reservation pods' app label, the stuck-in-releasing threshold).
CycleInputs = tuple[tuple[int, ...], bool, bool, str, float]
#: What every job is built against besides its PodGroup and pods: the PriorityClasses' and Topologies' counts of
#: changes, whether no pod has an implicit claim, and the cache's settings.
Context = tuple[int, int, bool, bool, bool, str, float]


_NAME = operator.attrgetter("name")
_INVALID = operator.attrgetter("invalid")


@attrs.define(eq=False)
class Cycle:
    """One cycle's input: the snapshot, the views behind it, and what needs cleaning up. Its ``pods`` are the
    cache's own, changed in place by the next cycle's build: read them before it starts."""

    snapshot: Snapshot
    pods: dict[str, PodView]
    podgroups: dict[str, PodGroupView]
    #: Failed BindRequests, those of pods that are gone or replaced, and those for vanished nodes.
    stale_bind_requests: list[BindRequestView]


class Placement(NamedTuple):
    """Where a pod is as the cache reads it: its status and node, and what its BindRequest (or the cache's
    assumed binding) gives it -- shared GPU devices, NUMA zones, its claims' allocations and implicit claim."""

    status: TaskStatus
    node: str | None
    groups: tuple[str, ...]
    zones: tuple[ZonePlacement, ...]
    allocations: tuple[tuple[str, Allocation], ...]
    extended: ExtendedClaim | None


class Build:
    """The phases of one cycle's build, and what each found for the next."""

    def __init__(self, cache: ClusterCache, reuse: Reuse, now: float, inputs: CycleInputs) -> None:
        self.cache, self.reuse, self.now, self.inputs = cache, reuse, now, inputs
        self.informers: dict[str, Informer] = cache.informers
        self.problems: list[Problem] = []
        self.pods: dict[str, PodView] = {}
        self.pods_touched: set[str] = set()
        self.node_views: dict[str, NodeView] = {}
        self.nodes_touched: set[str] = set()
        self.numa: dict[str, NumaTopology | None] = {}
        self.binds: dict[str, BindRequestView] = {}
        self.binds_changed: set[str] = set()
        self.stale: list[BindRequestView] = []
        self.bound_to_nowhere: set[str] = set()
        self.assumed: Assumptions = ({}, set())
        self.podgroup_views: dict[str, PodGroupView] = {}
        self.resources = DynamicResources()
        self.extended_claims: dict[str, ResourceClaim] = {}
        #: The pods to go over (None: all of them), and the PodGroups whose jobs may not be the last cycle's, the
        #: others in the same order and the new ones after them (None: any).
        self.redo: set[str] | None = None
        self.affected: set[str] | None = None
        #: The jobs by PodGroup key in the order of the store; the inputs and tasks of those gathering their tasks.
        self.jobs: dict[str, Job] = {}
        self.job_inputs: dict[str, JobInputs] = {}
        self.members: dict[str, list[Task]] = {}
        #: What pods outside the jobs hold on each node (resources and pod count), their host ports, and the GPU
        #: reservation pods.
        self.used: dict[str, tuple[Resources, int]] = {}
        self.ports: dict[str, list[HostPort]] = {}
        self.reserving: list[tuple[str, PodView]] = []

    def run(self) -> Cycle:
        """The cycle, its phases in order; the pods are taken first, as KAI lists them first."""
        self.pods, self.pods_touched = self.informers["pods"].take()
        self.nodes()
        self.bind_requests()
        self.podgroups()
        self.tasks()
        self.reservations()
        return self.snapshot()

    def nodes(self) -> None:
        """The nodes taking part (with restricted node scheduling, only those labelled GPU or CPU workers) by
        name, those whose view cannot be read reported and left out, and their NUMA topologies. Nothing to take
        over yet: a node's ``Node`` is built once what pods outside the jobs hold on it is known (:meth:`snapshot`)."""
        restrict = self.cache.restrict_node_scheduling
        stored, self.nodes_touched = self.informers["nodes"].take()
        worker = (names.GPU_WORKER_LABEL, names.CPU_WORKER_LABEL)
        node_views = dict(zip(map(_NAME, stored.values()), stored.values())) if not restrict else {
            n.name: n for n in stored.values() if worker[0] in n.labels or worker[1] in n.labels}
        invalid = list(filter(_INVALID, node_views.values()))
        self.problems += [Problem("node", view.name, "InvalidNode", view.invalid) for view in invalid]
        self.node_views = {k: v for k, v in node_views.items() if not v.invalid} if invalid else node_views
        for nrt in self.informers["noderesourcetopologies"].list():
            if nrt.name not in self.node_views:
                continue
            if nrt.invalid:
                self.problems.append(Problem("node", nrt.name, "InvalidNodeResourceTopology", nrt.invalid))
            self.numa[nrt.name] = nrt.topology

    def bind_requests(self) -> None:
        """The live BindRequests by pod key (their pods are Binding), the stale ones to delete, and the cache's
        own writes the watch has not shown yet. Taken over: a BindRequest's liveness, worked out again only when
        it, its pod or the node names changed (:class:`~kai.scheduler.bindrequests.LiveBindRequests`)."""
        requests, touched = self.informers["bindrequests"].take()
        self.binds, self.stale, self.binds_changed = self.reuse.bind_requests.update(
            requests, touched, self.pods, self.pods_touched, self.node_views.keys(), self.problems)
        self.bound_to_nowhere = {p.name for p in self.problems if p.reason == NODE_NOT_FOUND}
        self.assumed = self.cache.assumptions(self.pods, self.binds)

    def podgroups(self) -> None:
        """The jobs by PodGroup key in the store's order, each with its priority; PodGroups that cannot be read
        and DRA objects that cannot be read are reported. Taken over: every job that no change can reach is
        carried over whole with its tasks (:meth:`~kai.scheduler.reuse.Reuse.redo`); the others gather their
        tasks again (:meth:`tasks`), into the last cycle's job when its PodGroup view is the very object and
        its priority and the topologies are the same."""
        inf, reuse = self.informers, self.reuse
        classes = {name: value for name, value, _ in inf["priorityclasses"].list()}
        default_priority = next((v for _, v, is_default in inf["priorityclasses"].list() if is_default),
                                DEFAULT_PRIORITY)
        self.podgroup_views, groups_touched = views, groups_touched = inf["podgroups"].take()
        self.cache.overlay_annotated(views, groups_touched)  # its own writes the watch does not show yet
        self.problems += [Problem("job", pg.key, "InvalidPodGroup", pg.invalid)
                          for pg in filter(_INVALID, views.values())]
        topologies = inf["topologies"].changes  # a job's topology constraint is resolved against them
        self._dynamic_resources()
        context = (inf["priorityclasses"].changes, topologies, not self.extended_claims, *self.inputs[1:])
        self.redo, self.affected = reuse.redo(self.pods, self.pods_touched | self.binds_changed, groups_touched,
                                              self.assumed, context)
        affected = self.affected
        compared = len(views)  # how many jobs at the end may be out of the store's order
        if affected is None:
            todo: Iterable[str] = views
        else:  # the last cycle's jobs, in place: the others are carried over with their tasks
            self.jobs = reuse.order
            for key in affected - views.keys():
                self.jobs.pop(key, None)
            # a PodGroup added since the last cycle is at the end of the store, among those changed since
            tail = list(itertools.takewhile(groups_touched.__contains__, reversed(views)))[::-1]
            new = [key for key in tail if key not in self.jobs]
            if len(self.jobs) + len(new) == len(views):
                todo, compared = sorted(key for key in affected if key in self.jobs and key in views) + new, len(tail)
            else:
                todo = list(filter(affected.__contains__, views))
        jobs = self.jobs
        for key in todo:
            pg = views[key]
            inputs = self.job_inputs[key] = (job_priority(pg, classes, default_priority), topologies)
            jobs[key] = reuse.jobs.take_over(key, pg, inputs) or convert.to_job(pg, inputs[0])
            self.members[key] = []
        if affected is not None and (len(jobs) != len(views) or list(itertools.islice(reversed(jobs), compared))
                                     != list(itertools.islice(reversed(views), compared))):
            # a PodGroup made again moved in the store
            self.jobs, self.affected = {key: jobs[key] for key in views}, None

    def tasks(self) -> None:
        """Each pod of a job becomes its task, in the store's order; any other pod holding a node holds what it
        asks there. Taken over: a pod settled in the last cycle (its task depended on its view and BindRequest
        alone) whose view is the very object and whose BindRequest is the same keeps its task without its
        status worked out; any other pod's task when its view is the very object and its job, status, node,
        shared GPU devices and NUMA zones are the same -- never for a pod with ResourceClaims or an implicit
        claim, whose request depends on the DRA objects. A job keeps its object when its tasks are all taken
        over, in the same order."""
        reuse, pods = self.reuse, self.pods
        redo = pods.values() if self.redo is None else map(pods.__getitem__, filter(self.redo.__contains__, pods))
        for pod in redo:  # in the store's order
            bind = self.binds.get(pod.key)
            found = self._settled(pod, bind) or self._task(pod, bind)
            if found is not None:
                task, job_key = found
                self.members[job_key].append(task)
                reuse.member(job_key, pod, task)
        for key, tasks in self.members.items():
            job, pg, inputs = self.jobs[key], self.podgroup_views[key], self.job_inputs[key]
            if not (len(job.tasks) == len(tasks) and all(map(operator.is_, job.tasks.values(), tasks))):
                if reuse.jobs.take_over(key, pg, inputs) is job:  # its tasks changed: built afresh, checked as new
                    job = self.jobs[key] = convert.to_job(pg, inputs[0])
                for task in tasks:
                    job.add_task(task)
            reuse.jobs.keep(key, pg, inputs, job)

    def _settled(self, pod: PodView, bind: BindRequestView | None) -> tuple[Task, str] | None:
        """The task of a pod settled in the last cycle with this very view and the same BindRequest, and its job's
        key; None when it is not one, or its job or sub-group is gone."""
        bound, evicted = self.assumed
        if self.extended_claims or pod.key in bound or pod.key in evicted:
            return None
        reuse = self.reuse
        inputs = reuse.settled.take_over(pod.key, pod, (bind,))
        if inputs is None:
            return None
        job = self.jobs.get(inputs[0])
        task = reuse.tasks.take_over(pod.key, pod, inputs) if job is not None and pod.pod_set in job.pod_sets \
            else None
        if task is None:
            return None
        reuse.tasks.keep(pod.key, pod, inputs, task)
        reuse.settled.keep(pod.key, pod, (bind,), inputs)
        return task, inputs[0]

    def _task(self, pod: PodView, bind: BindRequestView | None) -> tuple[Task, str] | None:
        """The task of a pod worked out from its view, BindRequest and assumed writes, and its job's key; None for a
        pod of no job, whose usage is added to its node's."""
        place = self._placement(pod, bind)
        job = self.jobs.get(f"{pod.namespace}/{pod.pod_group}") if pod.scheduler == self.cache.scheduler_name else None
        if job is not None and pod.pod_set not in job.pod_sets:
            self.problems.append(Problem("task", pod.key, "UnknownSubGroup",
                                         f"pod names sub-group {pod.pod_set!r}, which PodGroup {job.uid} does not "
                                         "define; the pod is not scheduled"))
            job = None
        active = place.status in ACTIVE_USED
        if place.allocations and active:
            _being_allocated(self.resources, pod, place.allocations)
        if job is None:
            if place.node and active:
                self._outside(pod, place.node)
            return None
        entry = _extended_entry(self.resources, self.extended_claims, pod, place.extended if active else None) \
            if self.extended_claims or place.extended is not None else ()
        inputs: TaskInputs = (job.uid, place.status, place.node, place.groups, place.zones)
        own = not (pod.resource_claims or entry)  # built from the view and inputs alone
        reuse = self.reuse
        task = reuse.tasks.take_over(pod.key, pod, inputs) if own else None
        if task is None:
            task = convert.to_task(pod, job.uid, place.status, place.node, place.groups, place.zones, self.resources,
                                   entry)
        if own:
            reuse.tasks.keep(pod.key, pod, inputs, task)
            bound, evicted = self.assumed
            if not (pod.deleting or place.allocations or place.extended is not None or pod.numa_invalid
                    or pod.key in bound or pod.key in evicted):
                reuse.settled.keep(pod.key, pod, (bind,), inputs)
        if pod.numa_invalid:
            self.problems.append(Problem("task", pod.key, "InvalidNumaPlacement", pod.numa_invalid))
        return task, job.uid

    def _placement(self, pod: PodView, bind: BindRequestView | None) -> Placement:
        """Where ``pod`` is: as its phase and BindRequest say, Binding where the cache assumes it bound (a node that
        is gone is a problem), Releasing when the cache assumes it evicted."""
        stuck_after = self.cache.stuck_after
        status, node = convert.pod_state(pod, bind, self.now, stuck_after)
        if pod.deleting and (stuck_at := convert.stuck_at(pod, stuck_after)) > self.now:
            self.reuse.until = min(self.reuse.until, stuck_at)
        groups, zones = (bind.gpu_groups, bind.numa_zones) if bind is not None else ((), ())
        allocations = bind.claim_allocations if bind is not None and not pod.node_name else ()
        extended = bind.extended_claim if bind is not None and not pod.node_name else None
        bound, evicted = self.assumed
        if pod.key in bound and status is TaskStatus.PENDING:
            assumed = bound[pod.key]
            if assumed.node in self.node_views:
                status, node = TaskStatus.BINDING, assumed.node
                groups, zones = assumed.gpu_groups, assumed.numa_zones
                allocations, extended = assumed.claim_allocations, assumed.extended
            elif pod.key not in self.bound_to_nowhere:
                self.problems.append(Problem("task", pod.key, NODE_NOT_FOUND,
                                             f"pod was being bound to node {assumed.node!r}, which no longer "
                                             "exists; it is scheduled again"))
        if pod.key in evicted and status in ACTIVE_USED:
            status = TaskStatus.RELEASING
        return Placement(status, node, groups, zones, allocations, extended)

    def _outside(self, pod: PodView, node: str) -> None:
        """A pod of no job holds what it asks on its node, and its host ports; a GPU reservation pod's GPU is
        its group's (:meth:`reservations`)."""
        reservation = pod.labels.get(names.RESERVATION_APP[0]) == self.cache.reservation_app
        _add_usage(self.used, node, pod, reservation)
        if pod.host_ports:
            self.ports.setdefault(node, []).extend(pod.host_ports)
        if reservation:
            self.reserving.append((node, pod))

    def reservations(self) -> None:
        """A GPU reservation pod holds its GPU while no task uses its shared device group (then the group holds
        it). Taken over: the shared devices each task holds, carried over with its pod
        (:attr:`~kai.scheduler.reuse.Reuse.shared`)."""
        shared_in_use = self.reuse.shared_in_use()
        for node, pod in self.reserving:
            if not any((node, group) in shared_in_use for group in pod.gpu_groups):
                _add_usage(self.used, node, pod, reservation=True, count_gpu=True)

    def snapshot(self) -> Cycle:
        """The cycle's snapshot: the nodes less what pods outside the jobs hold, the queues, the jobs, the
        Topologies, ConfigMaps, storage, DRA objects and PodDisruptionBudgets; it follows the last cycle's.
        Taken over: a node's ``Node`` when its view is the very object and what pods outside the jobs hold on
        it, their host ports and its NUMA topology are the same -- when the nodes are those of the last cycle, in
        the same order, only those changed since or with such pods, ports or topology (then or now) are looked
        at; queues are built afresh."""
        inf, reuse, views = self.informers, self.reuse, self.node_views
        held = self.used.keys() | self.ports.keys() | self.numa.keys()
        order = list(views)
        todo: Iterable[str]
        if order == reuse.node_order:
            todo = [name for name in self.nodes_touched | held | reuse.held if name in views]
            reuse.nodes.carry(set(todo))
            nodes = list(reuse.node_list)
        else:
            todo, nodes = order, [None] * len(order)  # type: ignore[list-item]
            reuse.node_order, reuse.node_index = order, {name: i for i, name in enumerate(order)}
        for name in todo:
            view = views[name]
            inputs = (self.used.get(name), tuple(self.ports.get(name, ())), self.numa.get(name))
            used, used_pods = inputs[0] or (None, 0)
            node = reuse.nodes.take_over(name, view, inputs) or convert.to_node(view, used, used_pods, inputs[1],
                                                                                inputs[2])
            nodes[reuse.node_index[name]] = reuse.nodes.keep(name, view, inputs, node)
        reuse.node_list, reuse.held = nodes, held
        queues = [convert.to_queue(q) for q in inf["queues"].list()]
        if not self.cache.full_hierarchy_fairness:
            queues = project_level_queues(queues, self.now)
        previous = reuse.cycle.snapshot if reuse.cycle is not None else None
        snap = build_snapshot(nodes, queues, self.jobs, self.now, inf["topologies"].list(),
                              inf["configmaps"].list(), self._storage() if reuse.claims_wanted() else None,
                              self.resources, previous, inf["poddisruptionbudgets"].list(), self.affected)
        if previous is None:
            snap.follow(None)  # the first: kept for the next
        _hold_rejected(snap)
        snap.problems[:0] = self.problems
        cycle = Cycle(snap, reuse.views.current, self.podgroup_views, self.stale)
        reuse.turn(cycle, self.inputs, self.pods, self.binds, self.assumed, self.jobs)
        return cycle

    def _storage(self) -> Storage:
        """The storage objects, read only in cycles where some pod to schedule has claims."""
        inf = self.informers
        return Storage.of(inf["persistentvolumeclaims"].list(), inf["persistentvolumes"].list(),
                          inf["storageclasses"].list(), inf["csistoragecapacities"].list(),
                          (name for name, tracked in inf["csidrivers"].list() if tracked))

    def _dynamic_resources(self) -> None:
        """The DRA objects; each that cannot be read is a problem naming it, and is left out."""
        read = {name: self.informers[name].list() for name in dra.INFORMERS}
        for objects in read.values():
            self.problems.extend(Problem(u.kind, u.key, f"Invalid{u.kind}", u.reason)
                                 for u in objects if isinstance(u, dra.Unreadable))
        kept = {name: [o for o in objects if not isinstance(o, dra.Unreadable)] for name, objects in read.items()}
        self.resources = DynamicResources.of(kept["deviceclasses"], kept["resourceslices"], kept["resourceclaims"],
                                             kept["resourceclaimtemplates"])
        self.extended_claims = {c.extended_for: c for c in self.resources.claims.values() if c.extended_for}


def _being_allocated(resources: DynamicResources, pod: PodView, allocations: tuple[tuple[str, Allocation], ...]
                     ) -> None:
    """A pod being bound holds the allocations its BindRequest carries until the binder writes them to
    its claims (as KAI's cache does), so no other pod is given the same devices meanwhile."""
    entries = {c.name: c for c in pod.resource_claims}
    for name, allocation in allocations:
        entry = entries.get(name)
        claim = resources.claim_of(pod.namespace, entry) if entry is not None else None
        if claim is None:
            continue
        reserved = claim.reserved_for if pod.key in claim.reserved_for else (*claim.reserved_for, pod.key)
        resources.claims[claim.key] = attrs.evolve(claim, allocation=claim.allocation or allocation,
                                                   reserved_for=reserved)


def _extended_entry(resources: DynamicResources, claims: dict[str, ResourceClaim], pod: PodView,
                    pending: ExtendedClaim | None) -> tuple[PodResourceClaim, ...]:
    """The entry of a pod's implicit claim for DRA-backed extended resources: the claim the binder created for
    it, else while it is being bound the one its BindRequest carries (held as allocated meanwhile)."""
    claim = claims.get(pod.key)
    if claim is None and pending is not None:
        claim = attrs.evolve(pending.claim, allocation=pending.allocation, reserved_for=(pod.key,))
        resources.claims[claim.key] = claim
    return (PodResourceClaim(EXTENDED_ENTRY, claim.name),) if claim is not None else ()


def _add_usage(used: dict[str, tuple[Resources, int]], node: str, pod: PodView, reservation: bool = False,
              count_gpu: bool = False) -> None:
    """Adds a pod the scheduler does not schedule. A GPU ``reservation`` pod's GPU and pod slot belong to its
    group; ``count_gpu`` adds just the GPU of a reservation whose group no pod uses any more."""
    res, count = used.get(node, (Resources(), 0))
    if count_gpu:
        res.gpu += pod.request.gpus if pod.request is not None else 0
    elif pod.request is not None:
        taken = pod.request.node_resources()
        if reservation:
            taken.gpu = 0.0
        res.add(taken)
    used[node] = (res, count + (0 if reservation or count_gpu else 1))


def _hold_rejected(snap: Snapshot) -> None:
    """Jobs the snapshot left out (unknown queue ...) still hold the nodes their pods run on."""
    position: dict[str | None, int] = {n.name: i for i, n in enumerate(snap.nodes)} if snap.rejected_jobs else {}
    own: set[int] = set()  # the nodes copied here: the others are kept from cycle to cycle and not changed
    for job in snap.rejected_jobs.values():
        for task in job.tasks.values():
            i = position.get(task.node) if task.status in ACTIVE_USED else None
            if i is not None:
                if i not in own:
                    node = snap.nodes[i]
                    snap.nodes[i] = attrs.evolve(node, allocatable=node.allocatable.copy())
                    own.add(i)
                node = snap.nodes[i]
                convert.take(node.allocatable, task.request.node_resources())
                node.max_pods = max(node.max_pods - 1, 0)
