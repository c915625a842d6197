"""The scheduler's view of the cluster: informers over the objects it reads, and a snapshot per cycle.

:class:`ClusterCache` watches pods, nodes, queues, PodGroups, BindRequests, PriorityClasses,
Topologies, ConfigMaps (their names only), the storage objects (PersistentVolumeClaims,
PersistentVolumes, StorageClasses, CSIStorageCapacities, CSIDrivers; read into the snapshot only in
cycles where a pod to schedule has claims) and -- when the cluster serves that API --
NodeResourceTopologies (slim views, :mod:`kai.scheduler.convert`) and sets
:attr:`ClusterCache.changed` on every change that can let a cycle decide something new (:func:`wakes`).
:meth:`ClusterCache.snapshot` builds the kernel's input from the stores, as KAI's cache does:

* a pod with a live BindRequest (not failed, for this very pod, on an existing node) is Binding on
  the selected node, so a pending BindRequest counts as allocated;
* pods that hold a node but belong to no PodGroup of this scheduler (other schedulers' pods, pods
  without a group) take their requests off the node's allocatable and hold their host ports;
* the cache's own writes are read back at once (:meth:`assume_bound`, :meth:`assume_evicted`)
  until the watch confirms them, so the next cycle never binds a pod twice;
* a placement on a node that does not exist counts nowhere: a BindRequest selecting one is stale
  (deleted), an assumed binding on one is ignored, and the pod is scheduled again -- each reported
  as a ``NodeNotFound`` problem naming the pod (a pod the kubelet already runs there is reported by
  :func:`~kai.framework.build_snapshot`).

* DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates (``resource.k8s.io/v1``, when
  served) become the snapshot's DRA model (:mod:`kai.kube.dra`); one that cannot be read is a problem
  naming it (``Invalid<Kind>``, logged and an event on the object) and is left out. A pod being bound
  holds the claim allocations its BindRequest (or the cache's assumption) carries until the claims show
  them, and the GPUs its claims ask for count in its request.
* a node's NodeResourceTopology gives it its NUMA zones; one that cannot be read is reported
  (``InvalidNodeResourceTopology``) and the node is scheduled without NUMA data, as is every node when
  the API is not served; a pod's NUMA placement record comes from its annotations or its BindRequest,
  and a malformed annotation is reported (``InvalidNumaPlacement``) and ignored.

Everything the kernel should not see is reported in :class:`Cycle` (``stale_bind_requests`` to
delete, ``problems`` naming the objects) instead of raising.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time

import attrs

from kai.api import ACTIVE_USED, HostPort, Job, Resources, Task, TaskStatus, names
from kai.api.dra import EXTENDED_ENTRY, Allocation, DynamicResources, ExtendedClaim, PodResourceClaim, ResourceClaim
from kai.api.storage import Storage
from kai.framework import Problem, Snapshot, build_snapshot
from kai.framework.snapshot import NODE_NOT_FOUND
from kai.kube import dra, storage
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.nrt import NrtView, nrt_view
from kai.kube.views import DEFAULT_PRIORITY, PodGroupView, job_priority, podgroup_view, priority_class_view, queue_view
from kai.kube.watch import Informer
from kai.logs import fields
from kai.scheduler import convert, views
from kai.scheduler.bindrequests import LiveBindRequests
from kai.scheduler.reuse import Reuse
from kai.scheduler.views import BindRequestView, PodView

log = logging.getLogger(__name__)

PATHS = {
    "pods": object_path(*names.PODS),
    "nodes": object_path(*names.NODES),
    "queues": object_path(*names.QUEUES),
    "podgroups": object_path(*names.PODGROUPS),
    "bindrequests": object_path(*names.BINDREQUESTS),
    "priorityclasses": object_path(*names.PRIORITYCLASSES),
    "topologies": object_path(*names.TOPOLOGIES),
    "noderesourcetopologies": object_path(*names.NODERESOURCETOPOLOGIES),
    "configmaps": object_path(*names.CONFIGMAPS),
    "persistentvolumeclaims": object_path(*names.PERSISTENTVOLUMECLAIMS),
    "persistentvolumes": object_path(*names.PERSISTENTVOLUMES),
    "storageclasses": object_path(*names.STORAGECLASSES),
    "csistoragecapacities": object_path(*names.CSISTORAGECAPACITIES),
    "csidrivers": object_path(*names.CSIDRIVERS),
    "deviceclasses": object_path(*names.DEVICECLASSES),
    "resourceslices": object_path(*names.RESOURCESLICES),
    "resourceclaims": object_path(*names.RESOURCECLAIMS),
    "resourceclaimtemplates": object_path(*names.RESOURCECLAIMTEMPLATES),
}
#: Informers of APIs a cluster may not serve (a CRD not installed, DRA off): name -> the API's group version.
OPTIONAL = {"noderesourcetopologies": names.NODERESOURCETOPOLOGIES[:2],
            **{name: names.RESOURCECLAIMS[:2] for name in dra.INFORMERS}}
#: How long a successful write of this scheduler is assumed without the watch showing it.
ASSUME_TTL = 60.0


@attrs.define(eq=False)
class Cycle:
    """One cycle's input: the snapshot, the views behind it, and what needs cleaning up."""

    snapshot: Snapshot
    pods: dict[str, PodView]
    podgroups: dict[str, PodGroupView]
    #: Failed BindRequests, those of pods that are gone or replaced, and those for vanished nodes.
    stale_bind_requests: list[BindRequestView]


#: What the scheduler itself writes back about a pod (its explanation) and a PodGroup (its explanation and the
#: times it records): a change of these alone lets no cycle decide anything new.
POD_RECORDS = frozenset({"unschedulable_message"})
PODGROUP_RECORDS = frozenset({"conditions", "last_start", "stale_since", "last_eviction"})


def wakes(kind: str, view, previous) -> bool:
    """Whether a change (``kind`` of informer event, the view now and the one it replaced) can let a cycle
    decide something new -- new work, freed room, a placement withdrawn -- and so should start one soon.
    Not so: a bound pod that starts running or gets a condition, a BindRequest that is made or succeeds,
    the scheduler's own records on a pod or PodGroup (:data:`POD_RECORDS`, :data:`PODGROUP_RECORDS`; the
    times it records count only as time passes), a NodeResourceTopology's availability (an exporter
    republishes it all the time). The periodic cycle sees those anyway. Anything else wakes a cycle."""
    if kind == "DELETED":
        return True
    if isinstance(view, BindRequestView):  # a new one, as a rule this scheduler's own, only takes room
        return view.failed
    if kind == "ADDED" or previous is None:
        return True
    if isinstance(view, PodView):
        if view.node_name and not (view.deleting or view.terminated):
            return False
        return _differs(view, previous, POD_RECORDS)
    if isinstance(view, PodGroupView):
        return _differs(view, previous, PODGROUP_RECORDS)
    return not isinstance(view, NrtView)


def _differs(view, previous, records: frozenset[str]) -> bool:
    """Whether two versions of a view differ in a field other than ``records``."""
    if type(view) is not type(previous):
        return True
    return any(getattr(view, f.name) != getattr(previous, f.name)
               for f in attrs.fields(type(view)) if f.name not in records)


@attrs.define(slots=True)
class _Assumed:
    uid: str
    node: str | None
    until: float
    gpu_groups: tuple = ()
    numa_zones: tuple = ()
    claim_allocations: tuple = ()
    extended: ExtendedClaim | None = None


class ClusterCache:
    def __init__(self, kube: Kube, scheduler_name: str = names.SCHEDULER_NAME,
                 stuck_after: float = convert.STUCK_IN_RELEASING_THRESHOLD) -> None:
        self.scheduler_name = scheduler_name
        #: Seconds after which a running pod being deleted is stuck in releasing.
        self.stuck_after = stuck_after
        #: Only nodes labelled as GPU or CPU workers take part (KAI's ``--restrict-node-scheduling``).
        self.restrict_node_scheduling = False
        #: The ``app`` label value of the binder's GPU reservation pods (``--resource-reservation-app-label``).
        self.reservation_app = names.RESERVATION_APP[1]
        self.changed = threading.Event()
        transforms = {
            "pods": functools.partial(views.pod_view, scheduler_name=scheduler_name),
            "nodes": views.node_view,
            "queues": queue_view,
            "podgroups": podgroup_view,
            "bindrequests": views.bindrequest_view,
            "priorityclasses": priority_class_view,
            "topologies": views.topology_view,
            "noderesourcetopologies": nrt_view,
            "configmaps": views.config_map_view,
            "persistentvolumeclaims": storage.claim_view,
            "persistentvolumes": storage.volume_view,
            "storageclasses": storage.storage_class_view,
            "csistoragecapacities": storage.storage_capacity_view,
            "csidrivers": storage.csi_driver_view,
            "deviceclasses": dra.device_class_view,
            "resourceslices": dra.resource_slice_view,
            "resourceclaims": dra.resource_claim_view,
            "resourceclaimtemplates": dra.claim_template_view,
        }
        self.informers = {
            name: Informer(kube, PATHS[name], transform=transforms[name], on_change=self._on_change, name=name)
            for name in PATHS
        }
        self._lock = threading.Lock()
        self._bound: dict[str, _Assumed] = {}
        self._evicted: dict[str, _Assumed] = {}
        self._reuse = Reuse()
        self._binds = LiveBindRequests()
        self.kube = kube

    def start(self) -> ClusterCache:
        served: dict[tuple[str, str], bool] = {}
        for name, informer in self.informers.items():
            if name in OPTIONAL:
                api = OPTIONAL[name]
                if api not in served:
                    served[api] = self._served(*api)
                if not served[api]:
                    informer.synced.set()  # nothing to list: no object of this kind exists
                    continue
            informer.start()
        return self

    def _served(self, group: str, version: str) -> bool:
        """Whether the API server serves ``group/version`` (asked once, at start, as KAI does)."""
        try:
            self.kube.get(f"/apis/{group}/{version}")
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot tell whether the API is served; not reading it", **fields(
                    api=f"{group}/{version}", error=str(exc)))
            else:
                log.info("API not served; nodes have no data from it", **fields(api=f"{group}/{version}"))
            return False
        return True

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def wait_synced(self, timeout: float | None = None) -> list[str]:
        """Waits for every first list; returns the names of the informers still not synced."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self.informers.values():
            informer.wait_synced(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return [name for name, inf in self.informers.items() if not inf.synced.is_set()]

    def _on_change(self, kind: str, obj, previous) -> None:
        if wakes(kind, obj, previous):
            self.changed.set()

    # --- the cache's own writes ---------------------------------------------------------------------

    def assume_bound(self, pod: PodView, node: str, gpu_groups: tuple[str, ...] = (), numa_zones: tuple = (),
                     claim_allocations: tuple[tuple[str, Allocation], ...] = (),
                     extended: ExtendedClaim | None = None) -> None:
        """A BindRequest for ``pod`` on ``node`` (shared GPU devices ``gpu_groups``, NUMA placement
        ``numa_zones``, allocations of its ResourceClaims and its implicit claim) is being created."""
        with self._lock:
            self._bound[pod.key] = _Assumed(pod.uid, node, math.inf, gpu_groups, numa_zones, claim_allocations,
                                            extended)

    def assume_evicted(self, pod: PodView) -> None:
        """``pod`` is being deleted."""
        with self._lock:
            self._evicted[pod.key] = _Assumed(pod.uid, None, math.inf)

    def confirm(self, pod: PodView) -> None:
        """The write about ``pod`` succeeded: the watch should show it within :data:`ASSUME_TTL`."""
        with self._lock:
            for assumed in (self._bound.get(pod.key), self._evicted.get(pod.key)):
                if assumed is not None and assumed.uid == pod.uid:
                    assumed.until = time.monotonic() + ASSUME_TTL

    def forget(self, pod: PodView) -> None:
        """A write about ``pod`` failed: the watch alone tells its state again."""
        with self._lock:
            self._bound.pop(pod.key, None)
            self._evicted.pop(pod.key, None)

    def _assumptions(self, pods: dict[str, PodView], binds: dict[str, BindRequestView]):
        """The live assumptions; those the watch has confirmed or that expired are dropped."""
        now = time.monotonic()
        with self._lock:
            for key, a in list(self._bound.items()):
                pod = pods.get(key)
                if pod is None or pod.uid != a.uid or pod.node_name or key in binds or now > a.until:
                    if now > a.until and pod is not None and not pod.node_name and key not in binds:
                        log.warning("no BindRequest seen for an assumed binding; scheduling the pod again",
                                    **fields(pod=key, node=a.node))
                    del self._bound[key]
            for key, a in list(self._evicted.items()):
                pod = pods.get(key)
                if pod is None or pod.uid != a.uid or pod.deleting or pod.terminated or now > a.until:
                    del self._evicted[key]
            return dict(self._bound), set(self._evicted)

    # --- snapshot -----------------------------------------------------------------------------------

    def snapshot(self, now: float | None = None) -> Cycle:
        """The cycle of the stores as they are; built from the objects of the last one where nothing they derive
        from has changed (:mod:`kai.scheduler.reuse`)."""
        now = time.time() if now is None else now
        inf = self.informers
        reuse = self._reuse
        inputs = (tuple(informer.changes for informer in inf.values()), self.restrict_node_scheduling,
                  self.reservation_app, self.stuck_after)
        if reuse.cycle is not None and inputs == reuse.inputs:
            again = reuse.same_cycle(self._assumptions(reuse.pods, reuse.binds), now)
            if again is not None:
                return again
        reuse.start()
        try:
            return self._build(now, inputs)
        except BaseException:
            # what the failed build had taken from the informers is lost: start afresh
            self._reuse, self._binds = Reuse(), LiveBindRequests()
            raise

    def _build(self, now: float, inputs: tuple) -> Cycle:
        inf = self.informers
        reuse = self._reuse
        pods, pods_touched = inf["pods"].take()
        restrict = self.restrict_node_scheduling
        node_views = {n.name: n for n in inf["nodes"].list()
                      if not restrict or names.GPU_WORKER_LABEL in n.labels or names.CPU_WORKER_LABEL in n.labels}
        problems: list[Problem] = []
        for view in node_views.values():
            if view.invalid:
                problems.append(Problem("node", view.name, "InvalidNode", view.invalid))
        node_views = {k: v for k, v in node_views.items() if not v.invalid}
        numa = {}
        for nrt in inf["noderesourcetopologies"].list():
            if nrt.name not in node_views:
                continue
            if nrt.invalid:
                problems.append(Problem("node", nrt.name, "InvalidNodeResourceTopology", nrt.invalid))
            numa[nrt.name] = nrt.topology

        brs, brs_touched = inf["bindrequests"].take()
        binds, stale, binds_changed = self._binds.update(brs, brs_touched, pods, pods_touched, node_views, problems)
        bound_to_nowhere = {p.name for p in problems if p.reason == NODE_NOT_FOUND}
        assumptions = self._assumptions(pods, binds)
        bound, evicted = assumptions

        classes = {name: value for name, value, _ in inf["priorityclasses"].list()}
        default_priority = next((v for _, v, is_default in inf["priorityclasses"].list() if is_default),
                                DEFAULT_PRIORITY)
        podgroups, groups_touched = inf["podgroups"].take()
        problems += [Problem("job", pg.key, "InvalidPodGroup", pg.invalid) for pg in podgroups.values() if pg.invalid]
        topologies = inf["topologies"].changes  # a job's topology constraint is resolved against them
        resources = self._dynamic_resources(problems)
        extended_claims = {c.extended_for: c for c in resources.claims.values() if c.extended_for}
        settle = not extended_claims  # else a pod may have gained an implicit claim
        context = (inf["priorityclasses"].changes, topologies, settle, *inputs[1:])
        # The pods worked out afresh and the jobs whose tasks are gathered again; the rest is taken over.
        redo, affected = reuse.redo(pods, pods_touched | binds_changed, groups_touched, assumptions, context)
        # (view, inputs, job) by PodGroup key in the order of the store: taken over, or None to work out here
        entries = dict.fromkeys(podgroups) if affected is None else \
            {key: None if key in affected else reuse.jobs.get(key) for key in podgroups}
        members: dict[str, list[Task]] = {key: [] for key, entry in entries.items() if entry is None}
        for key in members:
            pg = podgroups[key]
            job_inputs = (job_priority(pg, classes, default_priority), topologies)
            entries[key] = (pg, job_inputs, reuse.job(key, pg, job_inputs) or convert.to_job(pg, job_inputs[0]))
        jobs: dict[str, Job] = {key: entry[2] for key, entry in entries.items()}

        used: dict[str, tuple[Resources, int]] = {}
        ports: dict[str, list[HostPort]] = {}
        reservations: list[tuple[str, PodView]] = []
        pod_state, stuck_after, own = convert.pod_state, self.stuck_after, self.scheduler_name
        for pod in (pods.values() if redo is None else (pods[k] for k in pods if k in redo)):
            bind = binds.get(pod.key)
            kept = reuse.settled(pod.key, pod, bind) if settle and pod.key not in bound and pod.key not in evicted \
                else None
            job = jobs.get(kept[1][0]) if kept is not None else None
            if job is not None and pod.pod_set in job.pod_sets:  # the same task, as in the last cycle
                task = kept[2]
                reuse.tasks[pod.key] = kept
                reuse.settle(pod.key, bind, kept)
            else:
                status, node = pod_state(pod, bind, now, stuck_after)
                if pod.deleting and (stuck_at := convert.stuck_at(pod, stuck_after)) > now:
                    reuse.until = min(reuse.until, stuck_at)
                groups, zones = (bind.gpu_groups, bind.numa_zones) if bind is not None else ((), ())
                allocations = bind.claim_allocations if bind is not None and not pod.node_name else ()
                extended = bind.extended_claim if bind is not None and not pod.node_name else None
                if pod.key in bound and status is TaskStatus.PENDING:
                    assumed = bound[pod.key]
                    if assumed.node in node_views:
                        status, node = TaskStatus.BINDING, assumed.node
                        groups, zones = assumed.gpu_groups, assumed.numa_zones
                        allocations, extended = assumed.claim_allocations, assumed.extended
                    elif pod.key not in bound_to_nowhere:
                        problems.append(Problem("task", pod.key, NODE_NOT_FOUND,
                                                f"pod was being bound to node {assumed.node!r}, which no longer "
                                                "exists; it is scheduled again"))
                if pod.key in evicted and status in ACTIVE_USED:
                    status = TaskStatus.RELEASING
                job = jobs.get(f"{pod.namespace}/{pod.pod_group}") if pod.scheduler == own else None
                if job is not None and pod.pod_set not in job.pod_sets:
                    problems.append(Problem("task", pod.key, "UnknownSubGroup",
                                            f"pod names sub-group {pod.pod_set!r}, which PodGroup {job.uid} does not "
                                            "define; the pod is not scheduled"))
                    job = None
                if allocations and status in ACTIVE_USED:
                    _being_allocated(resources, pod, allocations)
                if job is None:
                    if node and status in ACTIVE_USED:
                        reservation = _is_reservation(pod, self.reservation_app)
                        _add_usage(used, node, pod, reservation)
                        if pod.host_ports:
                            ports.setdefault(node, []).extend(pod.host_ports)
                        if reservation:
                            reservations.append((node, pod))
                    continue
                entry = _extended_entry(resources, extended_claims, pod, extended if status in ACTIVE_USED else None) \
                    if extended_claims or extended is not None else ()
                task_inputs = (job.uid, status, node, groups, zones)
                task = reuse.task(pod.key, pod, task_inputs) if not (pod.resource_claims or entry) else None
                if task is None:
                    task = convert.to_task(pod, job.uid, status, node, groups, zones, resources, entry)
                if not (pod.resource_claims or entry):
                    reuse.tasks[pod.key] = (pod, task_inputs, task)
                    if not (pod.deleting or allocations or extended is not None or pod.numa_invalid
                            or pod.key in bound or pod.key in evicted):
                        reuse.settle(pod.key, bind, reuse.tasks[pod.key])
                if pod.numa_invalid:
                    problems.append(Problem("task", pod.key, "InvalidNumaPlacement", pod.numa_invalid))
            members[job.uid].append(task)
            reuse.member(job.uid, pod, task)
        for key, tasks in members.items():
            job = jobs[key]
            pg, job_inputs, _ = entries[key]
            if not reuse.same_tasks(job, tasks):
                if reuse.taken_again(key, job):  # its tasks changed: built afresh, to be checked as a new job
                    job = jobs[key] = convert.to_job(pg, job_inputs[0])
                for task in tasks:
                    job.add_task(task)
            reuse.jobs[key] = (pg, job_inputs, job)
        shared_in_use = reuse.shared_in_use()
        for node, pod in reservations:  # a group no pod uses any more holds its GPU until its reservation goes
            if not any((node, group) in shared_in_use for group in pod.gpu_groups):
                _add_usage(used, node, pod, reservation=True, count_gpu=True)

        nodes = [reuse.node(v, used.get(name), tuple(ports.get(name, ())), numa.get(name))
                 for name, v in node_views.items()]
        queues = [convert.to_queue(q) for q in inf["queues"].list()]
        previous = reuse.cycle.snapshot if reuse.cycle is not None else None
        snap = build_snapshot(nodes, queues, jobs.values(), now, inf["topologies"].list(), inf["configmaps"].list(),
                              self._storage() if reuse.claims_wanted() else None, resources, previous)
        if previous is None:
            snap.follow(None)  # the first: kept for the next
        _hold_rejected(snap)
        snap.problems[:0] = problems
        cycle = Cycle(snap, reuse.kept_pods, podgroups, stale)
        reuse.keep(cycle, inputs, pods, binds, assumptions)
        return cycle

    def _storage(self) -> Storage:
        """The storage objects, read only in cycles where some pod to schedule has claims."""
        inf = self.informers
        return Storage.of(inf["persistentvolumeclaims"].list(), inf["persistentvolumes"].list(),
                          inf["storageclasses"].list(), inf["csistoragecapacities"].list(),
                          (name for name, tracked in inf["csidrivers"].list() if tracked))

    def _dynamic_resources(self, problems: list[Problem]) -> DynamicResources:
        """The DRA objects; each that cannot be read is a problem naming it, and is left out."""
        inf = self.informers
        read = {name: inf[name].list() for name in dra.INFORMERS}
        for objects in read.values():
            problems.extend(Problem(u.kind, u.key, f"Invalid{u.kind}", u.reason)
                            for u in objects if isinstance(u, dra.Unreadable))
        kept = {name: [o for o in objects if not isinstance(o, dra.Unreadable)] for name, objects in read.items()}
        return DynamicResources.of(kept["deviceclasses"], kept["resourceslices"], kept["resourceclaims"],
                                   kept["resourceclaimtemplates"])


def _being_allocated(resources: DynamicResources, pod: PodView, allocations: tuple) -> None:
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


def _is_reservation(pod: PodView, app: str) -> bool:
    return pod.labels.get(names.RESERVATION_APP[0]) == app


def _add_usage(used: dict, node: str, pod: PodView, reservation: bool = False, count_gpu: bool = False) -> None:
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
    position = {n.name: i for i, n in enumerate(snap.nodes)} if snap.rejected_jobs else {}
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
