"""The scheduler's view of the cluster: informers over the objects it reads, and a snapshot per cycle.

:class:`ClusterCache` watches pods, nodes, queues, PodGroups, BindRequests, PriorityClasses,
Topologies, ConfigMaps (their names only), the storage objects (PersistentVolumeClaims,
PersistentVolumes, StorageClasses, CSIStorageCapacities, CSIDrivers; read into the snapshot only in
cycles where a pod to schedule has claims) and -- when the cluster serves that API --
NodeResourceTopologies (slim views, :mod:`kai.scheduler.views`) -- of nodes, queues, PodGroups and
BindRequests only those of its partition (:mod:`kai.scheduler.partition`) -- and sets
:attr:`ClusterCache.changed` on every change that can let a cycle decide something new (:func:`wakes`).
:meth:`ClusterCache.snapshot` builds the kernel's input from the stores in KAI's phases (:mod:`kai.scheduler.build`),
as KAI's cache does:

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
from collections.abc import Callable, Iterable

import attrs

from kai.api import ZonePlacement, names
from kai.api.dra import Allocation, ExtendedClaim
from kai.kube import dra, storage
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.nrt import NrtView, nrt_view
from kai.kube.views import JsonObject, PodGroupView, podgroup_view, priority_class_view, queue_view, strings
from kai.kube.watch import Informer
from kai.logs import fields
from kai.scheduler import convert, views
from kai.scheduler.build import Build, Cycle
from kai.scheduler.partition import EVERYTHING, Partition
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
    "poddisruptionbudgets": object_path(*names.PODDISRUPTIONBUDGETS),
    "deviceclasses": object_path(*names.DEVICECLASSES),
    "resourceslices": object_path(*names.RESOURCESLICES),
    "resourceclaims": object_path(*names.RESOURCECLAIMS),
    "resourceclaimtemplates": object_path(*names.RESOURCECLAIMTEMPLATES),
}
#: Informers of APIs a cluster may not serve (a CRD not installed, DRA off): name -> the API's group version.
OPTIONAL = {"noderesourcetopologies": names.NODERESOURCETOPOLOGIES[:2],
            **{name: names.RESOURCECLAIMS[:2] for name in dra.INFORMERS}}
#: The informers that read only the objects of the scheduler's partition.
PARTITIONED = frozenset({"nodes", "queues", "podgroups", "bindrequests"})
#: How long a successful write of this scheduler is assumed without the watch showing it.
ASSUME_TTL = 60.0


#: What the scheduler itself writes back about a pod (its explanation) and a PodGroup (its explanation and the
#: times it records): a change of these alone lets no cycle decide anything new.
POD_RECORDS = frozenset({"unschedulable_message"})
#: The records this scheduler writes as PodGroup annotations, which later cycles read (minimum and maximum
#: runtime, staleness, reservations).
ANNOTATED_RECORDS = ("last_start", "stale_since", "last_eviction", "reservation")
PODGROUP_RECORDS = frozenset({"conditions", *ANNOTATED_RECORDS})


def wakes(kind: str, view: object, previous: object) -> bool:
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


def _differs(view: PodView | PodGroupView, previous: object, records: frozenset[str]) -> bool:
    """Whether two versions of a view differ in a field other than ``records``."""
    if type(view) is not type(previous):
        return True
    return any(getattr(view, f.name) != getattr(previous, f.name)
               for f in attrs.fields(type(view)) if f.name not in records)


@attrs.define(slots=True)
class Assumed:
    """A write of the cache's own about a pod (a binding or an eviction), held until the watch shows it."""

    uid: str
    node: str | None
    until: float
    gpu_groups: tuple[str, ...] = ()
    numa_zones: tuple[ZonePlacement, ...] = ()
    claim_allocations: tuple[tuple[str, Allocation], ...] = ()
    extended: ExtendedClaim | None = None


#: The assumed bindings by pod key and the keys of the pods assumed evicted.
Assumptions = tuple[dict[str, Assumed], set[str]]


class ClusterCache:
    def __init__(self, kube: Kube, scheduler_name: str = names.SCHEDULER_NAME,
                 stuck_after: float = convert.STUCK_IN_RELEASING_THRESHOLD, partition: Partition = EVERYTHING) -> None:
        self.scheduler_name = scheduler_name
        #: The nodes, queues, PodGroups and BindRequests read (:mod:`kai.scheduler.partition`).
        self.partition = partition
        #: Seconds after which a running pod being deleted is stuck in releasing.
        self.stuck_after = stuck_after
        #: Only nodes labelled as GPU or CPU workers take part (KAI's ``--restrict-node-scheduling``).
        self.restrict_node_scheduling = False
        #: Fair share down the whole queue tree (KAI's ``--full-hierarchy-fairness``), else among the projects.
        self.full_hierarchy_fairness = True
        #: The ``app`` label value of the binder's GPU reservation pods (``--resource-reservation-app-label``).
        self.reservation_app = names.RESERVATION_APP[1]
        self.changed = threading.Event()
        transforms: dict[str, Callable[[JsonObject], object]] = {
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
            "poddisruptionbudgets": views.disruption_budget_view,
            "deviceclasses": dra.device_class_view,
            "resourceslices": dra.resource_slice_view,
            "resourceclaims": dra.resource_claim_view,
            "resourceclaimtemplates": dra.claim_template_view,
        }
        self.informers = {
            name: Informer(kube, PATHS[name], transform=transforms[name], on_change=self._on_change, name=name,
                           label_selector=partition.selector if name in PARTITIONED else "")
            for name in PATHS
        }
        self._lock = threading.Lock()
        self._bound: dict[str, Assumed] = {}
        self._evicted: dict[str, Assumed] = {}
        #: PodGroups as this scheduler's annotation writes left them, by key, with when the assumption ends.
        self._annotated: dict[str, tuple[PodGroupView, float]] = {}
        self._annotations = 0  # how many such writes there were
        self._reuse = Reuse()
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

    def load(self, objects: dict[str, Iterable[JsonObject]]) -> ClusterCache:
        """Fill the stores from objects in hand (a snapshot file, by informer name) instead of the API server: of
        the kinds read by partition, only the partition's objects, as the informers' label selector lists them."""
        for name, informer in self.informers.items():
            items = objects.get(name, ())
            if name in PARTITIONED:
                items = [o for o in items if self.partition.matches(strings((o.get("metadata") or {}).get("labels")))]
            informer.load(items)
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

    def _on_change(self, kind: str, obj: object, previous: object) -> None:
        if wakes(kind, obj, previous):
            self.changed.set()

    # --- the cache's own writes ---------------------------------------------------------------------

    def assume_bound(self, pod: PodView, node: str, gpu_groups: tuple[str, ...] = (),
                     numa_zones: tuple[ZonePlacement, ...] = (),
                     claim_allocations: tuple[tuple[str, Allocation], ...] = (),
                     extended: ExtendedClaim | None = None) -> None:
        """A BindRequest (or a Binding) for ``pod`` on ``node`` (shared GPU devices ``gpu_groups``, NUMA placement
        ``numa_zones``, allocations of its ResourceClaims and its implicit claim) is being created."""
        with self._lock:
            self._bound[pod.key] = Assumed(pod.uid, node, math.inf, gpu_groups, numa_zones, claim_allocations,
                                            extended)

    def assume_evicted(self, pod: PodView) -> None:
        """``pod`` is being deleted."""
        with self._lock:
            self._evicted[pod.key] = Assumed(pod.uid, None, math.inf)

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

    def annotated(self, written: PodGroupView) -> None:
        """``written`` is a PodGroup as this scheduler's write of its records left it (the API server's answer):
        its records are assumed until the watch shows them, for at most :data:`ASSUME_TTL`."""
        with self._lock:
            self._annotated[written.key] = (written, time.monotonic() + ASSUME_TTL)
            self._annotations += 1

    def overlay_annotated(self, podgroups: dict[str, PodGroupView], touched: set[str]) -> None:
        """Gives the PodGroups of ``podgroups`` (a store's copy) the records this scheduler wrote and the watch does
        not show yet; the assumptions shown, gone or expired are dropped. The PodGroups looked at count as
        ``touched``, so that their jobs follow."""
        now = time.monotonic()
        with self._lock:
            for key, (written, until) in list(self._annotated.items()):
                view = podgroups.get(key)
                if view is None:
                    del self._annotated[key]
                    continue
                records = {f: getattr(written, f) for f in ANNOTATED_RECORDS}
                touched.add(key)  # the job is built again from the view: the store's, or with the records
                if (view.uid != written.uid or now > until
                        or all(getattr(view, f) == value for f, value in records.items())):
                    del self._annotated[key]
                else:
                    podgroups[key] = attrs.evolve(view, **records)

    def assumptions(self, pods: dict[str, PodView], binds: dict[str, BindRequestView]) -> Assumptions:
        """The live assumptions; those the watch has confirmed or that expired are dropped."""
        now = time.monotonic()
        with self._lock:
            for key, a in list(self._bound.items()):
                pod = pods.get(key)
                if pod is None or pod.uid != a.uid or pod.node_name or key in binds or now > a.until:
                    if now > a.until and pod is not None and not pod.node_name and key not in binds:
                        log.warning("neither a BindRequest nor the pod's node seen for an assumed binding; "
                                    "scheduling the pod again",
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
        reuse = self._reuse
        # the stores' changes and this scheduler's own annotation writes, which a cycle shows before the watch does
        changes = (*(informer.changes for informer in self.informers.values()), self._annotations)
        inputs = (changes, self.restrict_node_scheduling,
                  self.full_hierarchy_fairness, self.reservation_app, self.stuck_after)
        if reuse.cycle is not None and inputs == reuse.inputs:
            again = reuse.same_cycle(self.assumptions(reuse.pods, reuse.binds), now)
            if again is not None:
                return again
        reuse.start()
        try:
            return Build(self, reuse, now, inputs).run()
        except BaseException:
            self._reuse = Reuse()  # what the failed build had taken from the informers is lost: start afresh
            raise
