"""The scheduler's slim views of Kubernetes objects: the fields it reads, decoded once per change.

The ``*_view`` functions are informer transforms: they run once per object change, read only the fields used
(decoded JSON dicts in, small frozen records out) and never raise on bad content -- a pod whose request cannot be
read keeps the reason in ``PodView.invalid`` and is reported, not dropped. What a pod spec asks for is read by
:mod:`kai.scheduler.podspec`; the views other components read too (PodGroups, Queues, PriorityClasses) are
:mod:`kai.kube.views`.
"""

from __future__ import annotations

import attrs

from kai.api import (
    GPU,
    ContainerRequest,
    DisruptionBudget,
    HostPort,
    LabelRequirement,
    PodAffinityTerm,
    PodClaim,
    PodResourceClaim,
    ResourceRequest,
    Resources,
    Taint,
    Toleration,
    Topology,
    WeightedPodAffinityTerm,
    ZonePlacement,
)
from kai.api.dra import Allocation, ExtendedClaim
from kai.api.names import (
    GPU_GROUP_LABEL,
    GPU_MEMORY_LABEL,
    NUMA_PLACEMENT_OBSERVED_ANNOTATION,
    NUMA_PLACEMENT_PREDICTED_ANNOTATION,
    POD_GROUP_ANNOTATION,
    SCHEDULER_NAME,
    SUBGROUP_LABEL,
    TASK_PRIORITY_LABEL,
)
from kai.api.resources import gpu_memory_from_label
from kai.kube.dra import claim_allocations, extended_claim, pod_resource_claims
from kai.kube.nrt import placement_annotation, placement_record
from kai.kube.storage import pod_claims
from kai.kube.views import JsonObject, strings, timestamp
from kai.scheduler.podspec import (
    IGNORED_RESOURCES,
    affinity_terms,
    container_requests,
    host_ports,
    label_selector,
    parse_containers,
    pod_request,
    preferred_terms,
    quantity,
    required_config_maps,
    requirement,
)


@attrs.frozen(slots=True)
class PodView:
    key: str
    namespace: str
    name: str
    uid: str
    scheduler: str
    node_name: str
    phase: str
    deleting: bool
    #: When the pod's deletion started (``metadata.deletionTimestamp``), or None.
    deletion: float | None
    gated: bool
    created: float
    labels: dict[str, str]
    pod_group: str
    pod_set: str
    task_priority: int | None
    #: What the pod asks for (None when it cannot be read; ``invalid`` then says why).
    request: ResourceRequest | None
    #: Why the pod cannot be scheduled as defined (a bad annotation or quantity), else None.
    invalid: str | None
    node_selector: dict[str, str]
    node_affinity: tuple[tuple[LabelRequirement, ...], ...]
    pod_affinity: tuple[PodAffinityTerm, ...]
    pod_anti_affinity: tuple[PodAffinityTerm, ...]
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...]
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...]
    tolerations: tuple[Toleration, ...]
    #: The message of an existing ``PodScheduled=False`` condition (to skip writing it again).
    unschedulable_message: str | None
    nominated_node: str
    #: Shared GPU devices the binder gave the pod (its ``runai-gpu-group`` labels).
    gpu_groups: tuple[str, ...]
    #: ``status.qosClass`` and each container's requests (NUMA alignment).
    qos_class: str = ""
    containers: tuple[ContainerRequest, ...] = ()
    #: NUMA placement records: observed by the node, predicted by the scheduler; why one is ignored.
    numa_observed: tuple[ZonePlacement, ...] = ()
    numa_predicted: tuple[ZonePlacement, ...] = ()
    numa_invalid: str | None = None
    #: Host ports the pod binds (:func:`host_ports`).
    host_ports: tuple[HostPort, ...] = ()
    #: ConfigMaps the pod needs (:func:`required_config_maps`).
    config_maps: tuple[str, ...] = ()
    #: PersistentVolumeClaims of a pending pod's volumes (:func:`kai.kube.storage.pod_claims`).
    claims: tuple[PodClaim, ...] = ()
    #: ResourceClaims of the pod (:func:`kai.kube.dra.pod_resource_claims`).
    resource_claims: tuple[PodResourceClaim, ...] = ()

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def _numa_records(annotations: dict[str, str]
                  ) -> tuple[tuple[ZonePlacement, ...], tuple[ZonePlacement, ...], str | None]:
    observed, why_observed = placement_annotation(annotations, NUMA_PLACEMENT_OBSERVED_ANNOTATION)
    predicted, why_predicted = placement_annotation(annotations, NUMA_PLACEMENT_PREDICTED_ANNOTATION)
    return observed, predicted, why_observed or why_predicted


def pod_view(raw: JsonObject, scheduler_name: str = SCHEDULER_NAME) -> PodView | None:
    """The view of a pod the scheduler must know: its own pods, and other pods that hold a node."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    scheduler = spec.get("schedulerName") or "default-scheduler"
    node_name = spec.get("nodeName") or ""
    phase = status.get("phase") or "Pending"
    if scheduler != scheduler_name and (not node_name or phase in ("Succeeded", "Failed")):
        return None
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    labels, annotations = strings(meta.get("labels")), strings(meta.get("annotations"))
    invalid: str | None = None
    request: ResourceRequest | None = None
    containers: tuple[ContainerRequest, ...] = ()
    try:
        parsed = parse_containers(spec)
        request = pod_request(spec, annotations, parsed)
        containers = container_requests(spec, parsed)
    except ValueError as exc:  # GpuRequestError included: its message names the annotation
        invalid = str(exc)
    priority = labels.get(TASK_PRIORITY_LABEL)
    affinity = spec.get("affinity") or {}
    node_terms = (((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
                   or {}).get("nodeSelectorTerms")) or ()
    observed, predicted, numa_invalid = _numa_records(annotations)
    unschedulable = next((c.get("message") or "" for c in status.get("conditions") or ()
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
    return PodView(
        key=f"{ns}/{name}", namespace=ns, name=name, uid=meta.get("uid", ""), scheduler=scheduler,
        node_name=node_name, phase=phase, deleting=bool(meta.get("deletionTimestamp")),
        deletion=timestamp(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")), created=timestamp(meta.get("creationTimestamp")) or 0.0,
        labels=labels, pod_group=annotations.get(POD_GROUP_ANNOTATION, ""),
        pod_set=labels.get(SUBGROUP_LABEL) or "default",
        task_priority=int(priority) if priority and priority.lstrip("-").isdigit() else None,
        request=request, invalid=invalid, node_selector=strings(spec.get("nodeSelector")),
        node_affinity=tuple(tuple(requirement(e) for e in term.get("matchExpressions") or ()) for term in node_terms),
        pod_affinity=affinity_terms(affinity.get("podAffinity")) if affinity else (),
        pod_anti_affinity=affinity_terms(affinity.get("podAntiAffinity")) if affinity else (),
        preferred_pod_affinity=preferred_terms(affinity.get("podAffinity")) if affinity else (),
        preferred_pod_anti_affinity=preferred_terms(affinity.get("podAntiAffinity")) if affinity else (),
        tolerations=tuple(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                     str(t.get("value") or ""), str(t.get("effect") or ""))
                          for t in spec.get("tolerations") or ()),
        unschedulable_message=unschedulable, nominated_node=status.get("nominatedNodeName") or "",
        gpu_groups=_gpu_groups(labels), host_ports=host_ports(spec),
        config_maps=required_config_maps(spec, annotations) if not node_name else (),
        claims=pod_claims(spec, name, meta.get("uid", "")) if not node_name else (),
        resource_claims=pod_resource_claims(spec, status),
        qos_class=str(status.get("qosClass") or ""), containers=containers,
        numa_observed=observed, numa_predicted=predicted, numa_invalid=numa_invalid,
    )


def _gpu_groups(labels: dict[str, str]) -> tuple[str, ...]:
    groups = [labels[GPU_GROUP_LABEL]] if GPU_GROUP_LABEL in labels else []
    groups += sorted(k[len(GPU_GROUP_LABEL) + 1:] for k in labels if k.startswith(GPU_GROUP_LABEL + "/"))
    return tuple(dict.fromkeys(groups))


@attrs.frozen(slots=True)
class NodeView:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    max_pods: int
    unschedulable: bool
    ready: bool
    gpu_memory_mib: int
    #: Why the node's allocatable could not be read (the node is then left out), else None.
    invalid: str | None = None


def node_view(raw: JsonObject) -> NodeView:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    labels = strings(meta.get("labels"))
    invalid: str | None = None
    allocatable = Resources()
    max_pods = 110
    try:
        for res, value in (status.get("allocatable") or {}).items():
            amount = quantity(value, f"status.allocatable {res}")
            if res == "cpu":
                allocatable.cpu = amount * 1000.0
            elif res == "memory":
                allocatable.memory = amount
            elif res == GPU:
                allocatable.gpu = amount
            elif res == "pods":
                max_pods = int(amount)
            elif res not in IGNORED_RESOURCES:
                allocatable.scalars[res] = amount
    except ValueError as exc:
        invalid = str(exc)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    return NodeView(
        name=meta.get("name", ""), labels=labels,
        taints=tuple(Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
                     for t in spec.get("taints") or ()),
        allocatable=allocatable, max_pods=max_pods, unschedulable=bool(spec.get("unschedulable")), ready=ready,
        gpu_memory_mib=gpu_memory_from_label(labels.get(GPU_MEMORY_LABEL)), invalid=invalid,
    )


@attrs.frozen(slots=True)
class BindRequestView:
    key: str
    namespace: str
    name: str
    pod_name: str
    pod_uid: str
    node: str
    phase: str
    failed: bool
    gpu_groups: tuple[str, ...]
    #: ``spec.predictedNUMAZones``: the NUMA placement the scheduler chose (empty when unreadable).
    numa_zones: tuple[ZonePlacement, ...] = ()
    #: ``spec.resourceClaimAllocations``: (pod claim entry, :class:`kai.api.dra.Allocation`); empty when unreadable.
    claim_allocations: tuple[tuple[str, Allocation], ...] = ()
    #: ``spec.extendedResourceClaimAllocation`` (:class:`kai.api.dra.ExtendedClaim`), None when absent or unreadable.
    extended_claim: ExtendedClaim | None = None


def bindrequest_view(raw: JsonObject) -> BindRequestView:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    owner: JsonObject = next((o for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"), {})
    phase = str(status.get("phase") or "")
    limit = spec.get("backoffLimit")
    attempts = status.get("failedAttempts") or 0
    failed = phase == "Failed" and (not isinstance(limit, int) or attempts >= limit)
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    return BindRequestView(f"{ns}/{name}", ns, name, str(spec.get("podName") or ""), str(owner.get("uid") or ""),
                           str(spec.get("selectedNode") or ""), phase, failed,
                           tuple(str(g) for g in spec.get("selectedGPUGroups") or ()), _predicted_zones(spec),
                           *_claims(spec, ns, str(spec.get("podName") or "")))


def _claims(spec: JsonObject, namespace: str, pod: str
            ) -> tuple[tuple[tuple[str, Allocation], ...], ExtendedClaim | None]:
    try:
        return claim_allocations(spec), extended_claim(spec, namespace, pod)
    except (ValueError, TypeError, AttributeError):
        return (), None  # the binder fails such a BindRequest; the claims' own status tells


def _predicted_zones(spec: JsonObject) -> tuple[ZonePlacement, ...]:
    if not spec.get("predictedNUMAZones"):
        return ()
    try:
        return placement_record(spec["predictedNUMAZones"], "spec.predictedNUMAZones")
    except ValueError:
        return ()  # the pod's annotations still tell


def topology_view(raw: JsonObject) -> Topology:
    """A Topology: its levels' node-label keys from the widest level to the narrowest."""
    levels = [lv for lv in (raw.get("spec") or {}).get("levels") or () if isinstance(lv, dict)]
    return Topology((raw.get("metadata") or {}).get("name", ""), tuple(str(lv.get("nodeLabel", "")) for lv in levels),
                    {str(lv["alias"]): str(lv.get("nodeLabel", "")) for lv in levels if lv.get("alias")})


def config_map_view(raw: JsonObject) -> str:
    """A ConfigMap as its ``namespace/name`` alone: the scheduler only asks whether one exists."""
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def disruption_budget_view(raw: JsonObject) -> DisruptionBudget | None:
    """A PodDisruptionBudget (None without a selector: it covers no pod). Its ``status.disruptionsAllowed``
    counts only once the disruption controller has observed its current spec; until then it allows none,
    as the Eviction API refuses every eviction it covers."""
    meta, spec, status = (raw.get(k) or {} for k in ("metadata", "spec", "status"))
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        return None
    try:
        allowed = int(status.get("disruptionsAllowed") or 0)
        observed = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    except (TypeError, ValueError):
        allowed, observed = 0, False
    return DisruptionBudget(str(meta.get("name", "")), str(meta.get("namespace", "")), label_selector(selector),
                            allowed if observed else 0)
