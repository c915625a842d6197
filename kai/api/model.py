"""The scheduler's domain objects: nodes, tasks (pods), jobs (PodGroups) and queues.

These are plain attrs classes without behaviour beyond small derived properties. A snapshot of
them is built per scheduling cycle by a driver (the live cache, the simulator, a test) and
consumed by one Session, which changes task statuses and placements as it decides.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING

import attrs

from kai.api.numa import ContainerRequest, NumaTopology, ZonePlacement
from kai.api.resources import ResourceRequest, Resources
from kai.api.selectors import LabelRequirement, LabelSelector
from kai.api.status import ACTIVE_ALLOCATED, ACTIVE_USED, ALIVE, TaskStatus

if TYPE_CHECKING:
    from kai.api.dra import Allocation, ExtendedClaim, PodResourceClaim
    from kai.api.storage import PodClaim

UNLIMITED = -1.0


# --- node-level Kubernetes constraints --------------------------------------------------------------


@attrs.define(slots=True, frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@attrs.define(slots=True, frozen=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@attrs.define(slots=True, frozen=True)
class PodAffinityTerm:
    """Required pod (anti-)affinity: pods matching ``selector`` in the same ``topology_key`` domain."""

    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()  # empty: the pod's own namespace

    def matches(self, owner_namespace: str, namespace: str, labels: dict[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` matches the term of a pod in ``owner_namespace``."""
        return namespace in (self.namespaces or (owner_namespace,)) and self.selector.matches(labels)


@attrs.define(slots=True, frozen=True)
class WeightedPodAffinityTerm:
    """Preferred pod (anti-)affinity: a term and its weight (1-100)."""

    weight: int
    term: PodAffinityTerm


#: The host address of a port bound on every address.
ANY_IP = "0.0.0.0"


@attrs.define(slots=True, frozen=True)
class HostPort:
    """A host port a pod binds: ``ip`` (``0.0.0.0`` for every address), ``protocol``, ``port``."""

    ip: str
    protocol: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """Kubernetes' rule: same protocol and port, and one of the addresses is the other or ``0.0.0.0``."""
        return (self.port == other.port and self.protocol == other.protocol
                and (self.ip == other.ip or ANY_IP in (self.ip, other.ip)))


# --- cluster objects ---------------------------------------------------------------------------------


@attrs.define(slots=True, eq=False)
class Node:
    name: str
    allocatable: Resources
    labels: dict[str, str] = attrs.field(factory=dict)
    taints: tuple[Taint, ...] = ()
    max_pods: int = 110
    unschedulable: bool = False
    ready: bool = True
    #: Memory of each GPU device in MiB (0 when unknown).
    gpu_memory_mib: int = 0
    #: False while the node's GPU memory is not known yet (KAI's ``GpuMemorySynced``): no GPU-memory request
    #: is placed there. Live, a node without the GPU memory label has ``gpu_memory_mib`` 0 instead.
    gpu_memory_synced: bool = True
    #: The node's NUMA zones and Topology Manager policy (its NodeResourceTopology); None without one.
    numa: NumaTopology | None = None
    #: Host ports held by pods outside the snapshot's jobs (other schedulers' pods).
    host_ports: tuple[HostPort, ...] = ()
    #: The node's whole allocatable, before what pods outside the snapshot's jobs hold is taken off
    #: (None: ``allocatable``); the largest node of a pool is measured by it.
    capacity: Resources | None = None


@attrs.define(slots=True, eq=False)
class Task:
    """A pod of a job."""

    name: str
    job: str
    request: ResourceRequest = attrs.field(factory=ResourceRequest)
    status: TaskStatus = TaskStatus.PENDING
    node: str | None = None
    namespace: str = "default"
    uid: str = ""
    pod_set: str = "default"
    #: Order of the task inside its job (higher first); None = no priority.
    priority: int | None = None
    creation: float = 0.0
    labels: dict[str, str] = attrs.field(factory=dict)
    node_selector: dict[str, str] = attrs.field(factory=dict)
    #: Required node affinity: OR of terms, each an AND of requirements.
    node_affinity: tuple[tuple[LabelRequirement, ...], ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    #: Shared GPU devices (group ids scoped to the node) a placed shared-GPU task occupies.
    gpu_groups: tuple[str, ...] = ()
    #: A pod with legacy MIG annotations: never scheduled, and it keeps new MIG pods off its node.
    legacy_mig: bool = False
    #: Set when the pod's definition cannot be scheduled at all (bad annotation ...): the message says why.
    invalid: str | None = None
    #: The pod's ``status.nominatedNodeName`` (plugin ``nominatednode`` prefers that node).
    nominated_node: str = ""
    #: The pod's QoS class (``status.qosClass``: Guaranteed, Burstable, BestEffort; "" when unknown).
    qos_class: str = ""
    #: The pod's containers' requests (for NUMA alignment per container); empty: one container asking ``request``.
    containers: tuple[ContainerRequest, ...] = ()
    #: The NUMA placement recorded for a placed pod (observed by the node, else predicted at bind); empty: unknown.
    numa_recorded: tuple[ZonePlacement, ...] = ()
    #: The NUMA placement the session holds for the task; None while a new placement is to be chosen.
    numa_placement: tuple[ZonePlacement, ...] | None = ()
    #: Preferred pod affinity and anti-affinity (scored by plugin ``podaffinity``).
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    #: Host ports the pod binds (its containers' and native sidecars' ``hostPort``s).
    host_ports: tuple[HostPort, ...] = ()
    #: ConfigMaps (names in the pod's namespace) that must exist before the pod may start.
    config_maps: tuple[str, ...] = ()
    #: PersistentVolumeClaims of the pod's volumes (:class:`kai.api.storage.PodClaim`).
    claims: tuple[PodClaim, ...] = ()
    #: ResourceClaims of the pod (``spec.resourceClaims``, :class:`kai.api.dra.PodResourceClaim`).
    resource_claims: tuple[PodResourceClaim, ...] = ()
    #: (entry name, allocation) of each claim of a placed pod, as the session holds them (set by the
    #: ``dynamicresources`` plugin; a bind carries them to the binder).
    claim_allocations: tuple[tuple[str, Allocation], ...] = ()
    #: The implicit claim of a placed pod whose ``nvidia.com/gpu`` is DRA-backed on its node (KEP-5004; set by
    #: the ``dynamicresources`` plugin, created by the binder).
    extended_claim: ExtendedClaim | None = None

    def __attrs_post_init__(self) -> None:
        if not self.uid:
            self.uid = f"{self.namespace}/{self.name}"


#: The only level that may be the narrowest one of a Topology and no other (KAI's CRD rule).
HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_TOPOLOGY_LEVELS = 16


@attrs.define(slots=True, frozen=True)
class Topology:
    """A Topology object (``kai.scheduler/v1alpha1``): node-label keys from the widest level to the narrowest.

    A node belongs to the topology only when it has a label for every level. Its domain at level *i* is
    named by its label values of levels 0..*i* joined by dots (rack ``r1`` of zone ``z1`` is ``z1.r1``).
    """

    name: str
    levels: tuple[str, ...]
    #: Friendlier names of levels (``levels[].alias``): alias -> node label. A workload's constraint may
    #: name a level by either.
    aliases: dict[str, str] = attrs.field(factory=dict, hash=False)

    def level(self, name: str | None) -> str | None:
        """The node label a constraint's level ``name`` means (an alias resolved, anything else as is)."""
        return self.aliases.get(name, name) if name is not None else None

    def domains(self, labels: dict[str, str]) -> tuple[str, ...] | None:
        """The node's domain id at every level, widest first; None when the node is outside the topology."""
        ids: list[str] = []
        path = ""
        for level in self.levels:
            value = labels.get(level)
            if value is None:
                return None
            path = f"{path}.{value}" if ids else value
            ids.append(path)
        return tuple(ids)

    def problem(self) -> str | None:
        """Why the object is invalid under KAI's CRD rules, or None."""
        if not self.levels:
            return "a topology needs at least one level"
        if len(self.levels) > MAX_TOPOLOGY_LEVELS:
            return f"a topology has at most {MAX_TOPOLOGY_LEVELS} levels, not {len(self.levels)}"
        seen = set()
        for level in self.levels:
            if not level:
                return "a level has an empty node label"
            if level in seen:
                return f"level {level!r} is listed twice"
            seen.add(level)
        if HOSTNAME_LABEL in self.levels[:-1]:
            return f"{HOSTNAME_LABEL} may only be the last level"
        for alias, label in self.aliases.items():
            if alias in seen:
                return f"alias {alias!r} is also a level's node label"
            if label not in seen:
                return f"alias {alias!r} names {label!r}, which is not a level"
        return None


@attrs.define(slots=True, eq=False)
class TopologyConstraint:
    """Where a job, subgroup or pod set must (``required_level``) or should (``preferred_level``) be packed."""

    topology: str
    required_level: str | None = None
    preferred_level: str | None = None


@attrs.define(slots=True, eq=False)
class PodSet:
    """A leaf of a job's subgroup tree with its own gang size."""

    name: str
    min_available: int
    parent: str | None = None
    topology: TopologyConstraint | None = None


@attrs.frozen(slots=True)
class Member:
    """A direct member of a node of a job's subgroup tree, as subgroup orderings see it: a pod set (its
    active tasks against its gang size) or a subgroup (its satisfied members against those it needs)."""

    name: str
    is_pod_set: bool
    #: Active allocated tasks of a pod set; satisfied direct members of a subgroup.
    active: int
    #: A pod set's gang size; how many members a subgroup needs.
    required: int

    @property
    def satisfied(self) -> bool:
        return self.active >= self.required


@attrs.define(slots=True, eq=False)
class SubGroup:
    """An inner node of a job's subgroup tree; it is satisfied when ``min_subgroup`` of its direct members
    (pod sets and subgroups) are (None: all of them)."""

    name: str
    parent: str | None = None
    topology: TopologyConstraint | None = None
    min_subgroup: int | None = None


@attrs.frozen(slots=True)
class Reservation:
    """Nodes a waiting gang holds for itself from ``since`` until ``until`` (seconds since the epoch); other jobs
    are placed there only when they end before ``start``, the time the gang is expected to fit (None: unknown)."""

    nodes: tuple[str, ...]
    since: float
    until: float
    start: float | None = None

    def active(self, now: float) -> bool:
        return now < self.until


@attrs.define(slots=True, eq=False)
class Job:
    """A PodGroup: a gang of tasks with one queue and priority."""

    name: str
    queue: str
    priority: int = 0
    preemptible: bool = True
    creation: float = 0.0
    namespace: str = "default"
    uid: str = ""
    tasks: dict[str, Task] = attrs.field(factory=dict)
    pod_sets: dict[str, PodSet] = attrs.field(factory=dict)
    subgroups: dict[str, SubGroup] = attrs.field(factory=dict)
    topology: TopologyConstraint | None = None
    last_start: float | None = None
    stale_since: float | None = None
    #: When the job last lost a pod to an eviction (KAI's ``kai.scheduler/last-eviction-timestamp``).
    last_eviction: float | None = None
    #: ``spec.preemptionDelay`` (seconds): how long after its creation or last eviction the job may not
    #: make room for itself by evicting others (None or 0: no delay).
    preemption_delay: float | None = None
    #: ``spec.stalenessGracePeriod`` (seconds): this job's override of the stale-gang grace period.
    staleness_grace_period: float | None = None
    #: ``spec.minSubGroup``: how many direct members of the root must be satisfied (None: all).
    min_subgroup: int | None = None
    #: KAI's ``semi-preemptible``: the job is non-preemptible up to each pod set's gang size (its core) and
    #: preemptible above it (its surplus); ``preemptible`` is True, the core is protected where victims are chosen.
    semi_preemptible: bool = False
    #: The job's declared maximum runtime in seconds (``kai.scheduler/max-runtime``); None: not declared.
    max_runtime: float | None = None
    #: The nodes the job holds for itself while it waits (:mod:`kai.framework.reservation`); None: none.
    reservation: Reservation | None = None

    def __attrs_post_init__(self) -> None:
        if not self.uid:
            self.uid = f"{self.namespace}/{self.name}"
        if not self.pod_sets:
            self.pod_sets["default"] = PodSet("default", len(self.tasks))

    def add_task(self, task: Task) -> None:
        self.tasks[task.name] = task

    def tasks_of(self, pod_set: str) -> list[Task]:
        return [t for t in self.tasks.values() if t.pod_set == pod_set]

    def count(self, pod_set: str, statuses: Container[TaskStatus]) -> int:
        return sum(1 for t in self.tasks.values() if t.pod_set == pod_set and t.status in statuses)

    def has_pending(self) -> bool:
        for t in self.tasks.values():  # a loop, not any(): every action asks this of every job
            if t.status is TaskStatus.PENDING:
                return True
        return False

    def members(self, group: str | None) -> tuple[list[SubGroup], list[PodSet]]:
        """The direct members of subgroup ``group`` (None: the root): its subgroups, then its pod sets."""
        return ([g for g in self.subgroups.values() if g.parent == group],
                [ps for ps in self.pod_sets.values() if ps.parent == group])

    def required_members(self, group: str | None) -> int:
        """How many direct members of ``group`` (None: the root) must be satisfied for it to be."""
        groups, pod_sets = self.members(group)
        minimum = self.min_subgroup if group is None else self.subgroups[group].min_subgroup
        return len(groups) + len(pod_sets) if minimum is None else minimum

    def satisfied_members(self, group: str | None, counts: dict[str, int]) -> int:
        """Direct members of ``group`` that are satisfied when each pod set has ``counts[name]`` tasks."""
        groups, pod_sets = self.members(group)
        return (sum(1 for ps in pod_sets if counts.get(ps.name, 0) >= ps.min_available)
                + sum(1 for g in groups if self.satisfied_members(g.name, counts) >= self.required_members(g.name)))

    def tree_satisfied(self, counts: dict[str, int]) -> bool:
        """The subgroup tree is satisfied when each pod set has ``counts[name]`` tasks."""
        if not self.subgroups and self.min_subgroup is None:
            for name, ps in self.pod_sets.items():
                if counts.get(name, 0) < ps.min_available:
                    return False
            return True
        return self.satisfied_members(None, counts) >= self.required_members(None)

    def counts(self, statuses: Container[TaskStatus]) -> dict[str, int]:
        """Tasks in ``statuses`` per pod set."""
        out = dict.fromkeys(self.pod_sets, 0)
        for t in self.tasks.values():
            if t.status in statuses and t.pod_set in out:
                out[t.pod_set] += 1
        return out

    def is_ready(self) -> bool:
        """Enough alive, ungated tasks to satisfy the subgroup tree (every pod set's gang size, or
        ``min_subgroup`` members where set)."""
        alive = dict.fromkeys(self.pod_sets, 0)
        for t in self.tasks.values():
            if t.status in ALIVE and t.status is not TaskStatus.GATED and t.pod_set in alive:
                alive[t.pod_set] += 1
        return self.tree_satisfied(alive)

    def is_gang_satisfied(self) -> bool:
        return self.tree_satisfied(self.counts(ACTIVE_USED))

    def elastic_state(self) -> int:
        """-1 when some pod set is below its gang size, 0 when all are exactly at it, 1 above it."""
        active_by_set = dict.fromkeys(self.pod_sets, 0)
        for t in self.tasks.values():
            if t.status in ACTIVE_ALLOCATED and t.pod_set in active_by_set:
                active_by_set[t.pod_set] += 1
        state = 0
        for name, ps in self.pod_sets.items():
            active = active_by_set[name]
            if active < ps.min_available:
                return -1
            if active > ps.min_available:
                state = 1
        return state

    @property
    def gpus_required(self) -> float:
        return round(sum(t.request.gpus_required for t in self.tasks.values()), 2)

    def runtime_end(self) -> float | None:
        """When the running job reaches its declared maximum runtime (its last start plus it), or None."""
        if self.max_runtime is None or self.last_start is None:
            return None
        return self.last_start + self.max_runtime

    def preemption_delay_end(self) -> float | None:
        """When the job may first evict others (its creation or last eviction plus the delay), or None."""
        if not self.preemption_delay or self.preemption_delay <= 0:
            return None
        anchor = max(self.creation, self.last_eviction or self.creation)
        return anchor + self.preemption_delay


@attrs.define(slots=True, eq=False)
class QuotaSpec:
    """Quota of one resource: deserved amount, limit and over-quota weight (-1 = unlimited)."""

    deserved: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0


@attrs.define(slots=True, eq=False)
class ResourceTypeQuota:
    """A queue's GPU quota on one resource type (a GPU model or node pool): the nodes whose labels have every
    pair of ``node_selector``. ``Queue.gpu`` stays the queue's total over all types."""

    name: str
    node_selector: dict[str, str]
    gpu: QuotaSpec = attrs.field(factory=lambda: QuotaSpec(0.0, UNLIMITED, 1.0))

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a node with ``labels`` is of this type."""
        return all(labels.get(k) == v for k, v in self.node_selector.items())


#: Most resource types a cluster's queues may give (the queue order compares at most 16 resources: CPU, memory,
#: GPUs and one per type).
MAX_RESOURCE_TYPES = 13


def selectors_overlap(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether one node could match both selectors: no label they both name has two different values."""
    return not any(a[k] != b[k] for k in a.keys() & b.keys())


@attrs.define(slots=True, eq=False)
class Queue:
    """A node of the queue tree. Jobs reference leaf queues."""

    name: str
    parent: str | None = None
    priority: int = 100
    gpu: QuotaSpec = attrs.field(factory=QuotaSpec)
    cpu: QuotaSpec = attrs.field(factory=lambda: QuotaSpec(UNLIMITED, UNLIMITED, 1.0))
    memory: QuotaSpec = attrs.field(factory=lambda: QuotaSpec(UNLIMITED, UNLIMITED, 1.0))
    #: Creation time; the last tie-break of queue order.
    creation: float = 0.0
    #: Minimum runtimes from queue annotations, in seconds (None = inherit / plugin default).
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None
    #: ``spec.displayName`` ("" when unset): a label of the scheduler's queue metrics.
    display_name: str = ""
    #: GPU quota per resource type (``spec.resourceTypes``); empty: the queue's GPUs are one pool, as in KAI.
    resource_types: tuple[ResourceTypeQuota, ...] = ()


@attrs.frozen
class QueueDetails:
    """The queue behind a capacity veto (KAI's ``queueDetails``): amounts as (CPU millicores, memory bytes,
    GPUs), -1 unlimited."""

    name: str
    requested: tuple[float, float, float]
    deserved: tuple[float, float, float]
    allocated: tuple[float, float, float]
    allocated_non_preemptible: tuple[float, float, float]
    limits: tuple[float, float, float]
    job_requested: tuple[float, float, float]


@attrs.define(slots=True, frozen=True)
class Reject:
    """A veto: which plugin said no, and why (a message for events and fit errors); ``kind`` is KAI's
    unschedulable reason of a queue-capacity veto (``OverLimit``, ``NonPreemptibleOverQuota``), else empty,
    and ``details`` the queue behind it."""

    plugin: str
    reason: str
    kind: str = ""
    details: QueueDetails | None = None

    def __str__(self) -> str:
        return self.reason
