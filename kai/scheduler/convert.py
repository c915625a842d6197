"""Slim views -> the scheduler's domain objects.

The ``to_*`` functions build fresh ``kai.api`` objects from the views of :mod:`kai.scheduler.views`,
following KAI's rules for pod status and queue quotas; the cache takes them again in later cycles
while their inputs stay the same (:mod:`kai.scheduler.reuse`).
"""

from __future__ import annotations

import math

import attrs

from kai.api import (
    HostPort,
    Job,
    Node,
    NumaTopology,
    PodSet,
    Queue,
    ResourceRequest,
    Resources,
    SubGroup,
    Task,
    TaskStatus,
    ZonePlacement,
)
from kai.api.dra import DynamicResources, PodResourceClaim, pod_gpus
from kai.kube.views import PodGroupView, is_preemptible, is_semi_preemptible
from kai.scheduler.views import BindRequestView, NodeView, PodView


def take(allocatable: Resources, used: Resources) -> None:
    """Subtract ``used`` from ``allocatable`` in place."""
    allocatable.cpu -= used.cpu
    allocatable.memory -= used.memory
    allocatable.gpu -= used.gpu
    for k, v in used.scalars.items():
        allocatable.scalars[k] = allocatable.scalars.get(k, 0.0) - v


def to_node(view: NodeView, used: Resources | None = None, used_pods: int = 0,
            host_ports: tuple[HostPort, ...] = (), numa: NumaTopology | None = None) -> Node:
    """A Node whose allocatable excludes what pods outside the snapshot's jobs hold (``used``, ``host_ports``),
    with its NUMA topology (from its NodeResourceTopology) when it has one."""
    allocatable = view.allocatable.copy()
    if used is not None:
        take(allocatable, used)
    return Node(view.name, allocatable, dict(view.labels), view.taints, max(view.max_pods - used_pods, 0),
                view.unschedulable, view.ready, view.gpu_memory_mib, host_ports=host_ports,
                capacity=view.allocatable.copy(), numa=numa)


def to_queue(q: Queue) -> Queue:
    return attrs.evolve(q, gpu=attrs.evolve(q.gpu), cpu=attrs.evolve(q.cpu), memory=attrs.evolve(q.memory))


#: KAI's ``--stuck-in-releasing-threshold`` default, seconds.
STUCK_IN_RELEASING_THRESHOLD = 120.0


def pod_state(pod: PodView, bind: BindRequestView | None, now: float = 0.0,
              stuck_after: float = STUCK_IN_RELEASING_THRESHOLD) -> tuple[TaskStatus, str | None]:
    """KAI's task status and node of a pod, given its live BindRequest (if any). A running pod being deleted
    for longer than ``stuck_after`` seconds at ``now`` is stuck in releasing."""
    if pod.phase == "Running":
        if not pod.deleting:
            return TaskStatus.RUNNING, pod.node_name or None
        stuck = now > stuck_at(pod, stuck_after)
        return (TaskStatus.STUCK_IN_RELEASING if stuck else TaskStatus.RELEASING), pod.node_name or None
    if pod.phase == "Succeeded":
        return TaskStatus.SUCCEEDED, pod.node_name or None
    if pod.phase == "Failed":
        return TaskStatus.FAILED, pod.node_name or None
    if pod.phase == "Unknown":
        return TaskStatus.UNKNOWN, pod.node_name or None
    node = pod.node_name or (bind.node if bind is not None else "")
    if pod.deleting:
        return (TaskStatus.RELEASING, node) if node else (TaskStatus.DELETED, None)
    if pod.node_name:
        return TaskStatus.BOUND, pod.node_name
    if bind is not None:
        return TaskStatus.BINDING, bind.node
    if pod.gated:
        return TaskStatus.GATED, None
    return TaskStatus.PENDING, None


def stuck_at(pod: PodView, stuck_after: float = STUCK_IN_RELEASING_THRESHOLD) -> float:
    """When :func:`pod_state` finds a running pod being deleted stuck in releasing (infinity: never by time alone)."""
    if pod.phase == "Running" and pod.deleting and pod.deletion is not None:
        return pod.deletion + stuck_after
    return math.inf


def to_task(pod: PodView, job_uid: str, status: TaskStatus, node: str | None,
            gpu_groups: tuple[str, ...] = (), numa_zones: tuple[ZonePlacement, ...] = (),
            dra: DynamicResources | None = None, extended: tuple[PodResourceClaim, ...] = ()) -> Task:
    """The task of ``pod``; ``gpu_groups`` (from its BindRequest) stand in for the pod's own until it is bound.

    The GPUs its ResourceClaims ask for (devices of GPU classes, read from ``dra``) count in its request;
    ``extended`` is the entry of its implicit claim for DRA-backed extended resources, when it has one.

    Its recorded NUMA placement is the one the node observed, else ``numa_zones`` (its BindRequest's
    prediction), else the predicted annotation.
    """
    request = pod.request or ResourceRequest()
    if pod.resource_claims and dra is not None:
        claims = (dra.requests_of(pod.namespace, c) for c in pod.resource_claims)
        request = attrs.evolve(request, dra_gpus=pod_gpus(c for c in claims if c is not None))
    return Task(
        name=pod.name, job=job_uid, request=request, status=status, node=node,
        namespace=pod.namespace, uid=pod.key, pod_set=pod.pod_set, priority=pod.task_priority, creation=pod.created,
        labels=pod.labels, node_selector=pod.node_selector, node_affinity=pod.node_affinity,
        pod_affinity=pod.pod_affinity, pod_anti_affinity=pod.pod_anti_affinity, tolerations=pod.tolerations,
        gpu_groups=pod.gpu_groups or gpu_groups, invalid=pod.invalid, nominated_node=pod.nominated_node,
        qos_class=pod.qos_class, containers=pod.containers,
        numa_recorded=pod.numa_observed or numa_zones or pod.numa_predicted,
        preferred_pod_affinity=pod.preferred_pod_affinity, preferred_pod_anti_affinity=pod.preferred_pod_anti_affinity,
        host_ports=pod.host_ports, config_maps=pod.config_maps, claims=pod.claims,
        resource_claims=pod.resource_claims + extended,
    )



def to_job(pg: PodGroupView, priority: int) -> Job:
    job = Job(name=pg.name, queue=pg.queue, priority=priority, preemptible=is_preemptible(pg, priority),
              creation=pg.created, namespace=pg.namespace, uid=pg.key,
              pod_sets={"default": PodSet("default", pg.min_member)}, topology=pg.topology,
              last_start=pg.last_start, stale_since=pg.stale_since, last_eviction=pg.last_eviction,
              preemption_delay=pg.preemption_delay, staleness_grace_period=pg.staleness_grace_period,
              min_subgroup=pg.min_subgroup, semi_preemptible=is_semi_preemptible(pg), max_runtime=pg.max_runtime,
              reservation=pg.reservation)
    if pg.sub_groups:
        parents = {parent for _, _, parent, _, _ in pg.sub_groups if parent}
        job.pod_sets.clear()
        for name, min_member, parent, topology, min_subgroup in pg.sub_groups:
            if name in parents:
                job.subgroups[name] = SubGroup(name, parent or None, topology, min_subgroup)
            else:
                job.pod_sets[name] = PodSet(name, min_member, parent or None, topology)
    return job
