"""Slim views of Kubernetes objects: the fields the components read, decoded once per change.

The ``*_view`` functions are informer transforms: they run once per object change, read only the
fields used (decoded JSON dicts in, small frozen records out) and never raise on bad content -- a
pod whose request cannot be read keeps the reason in ``PodView.invalid`` and is reported, not
dropped. KAI's rules that read a view alone (a PodGroup's priority and preemptibility) are here too.
"""

from __future__ import annotations

import functools
from datetime import datetime

import attrs

from kai.api import (
    ANY_IP,
    GPU,
    MIG_PREFIX,
    UNLIMITED,
    ContainerRequest,
    HostPort,
    LabelRequirement,
    LabelSelector,
    PodAffinityTerm,
    Queue,
    QuotaSpec,
    ResourceRequest,
    Resources,
    Taint,
    Toleration,
    Topology,
    TopologyConstraint,
    WeightedPodAffinityTerm,
)
from kai.api.names import (
    GPU_GROUP_LABEL,
    GPU_MEMORY_LABEL,
    LAST_EVICTION_ANNOTATION,
    LAST_START_ANNOTATION,
    NUMA_PLACEMENT_OBSERVED_ANNOTATION,
    NUMA_PLACEMENT_PREDICTED_ANNOTATION,
    POD_GROUP_ANNOTATION,
    PREEMPTIBILITY_LABEL,
    SCHEDULER_NAME,
    SHARED_GPU_CONFIGMAP,
    STALE_ANNOTATION,
    SUBGROUP_LABEL,
    TASK_PRIORITY_LABEL,
)
from kai.api.podgroup import NON_PREEMPTIBLE, PREEMPTIBLE
from kai.api.resources import gpu_memory_from_label, parse_gpu_sharing
from kai.common.durations import parse_duration
from kai.common.quantity import QuantityError, parse
from kai.kube.dra import claim_allocations, extended_claim, pod_resource_claims
from kai.kube.nrt import placement_annotation, placement_record
from kai.kube.storage import pod_claims

#: Job priority when the PodGroup's class is unknown and no class is the global default (KAI's).
DEFAULT_PRIORITY = 50
#: Jobs below this priority are preemptible unless the PodGroup says otherwise.
PREEMPTIBLE_BELOW = 100
#: KAI multiplies queue memory quotas by 10^6 (its ``mebibytes`` constant).
QUEUE_MEMORY_UNIT = 1_000_000.0
IGNORED_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage", "storage"})


def timestamp(value) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@functools.lru_cache(maxsize=8192)
def _quantity(value: str) -> float:
    return float(parse(value))


def quantity(value, where: str) -> float:
    """A Kubernetes quantity in base units; ValueError naming ``where`` when it is not one."""
    try:
        return _quantity(value) if isinstance(value, str) else float(parse(value))
    except (QuantityError, TypeError):
        raise ValueError(f"{where}: {value!r} is not a Kubernetes quantity") from None


def go_duration(value) -> float | None:
    """Seconds of a Go duration string (``90s``, ``1h30m``); None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def _strings(value) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


# --- views ---------------------------------------------------------------------------------------


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
    labels: dict
    pod_group: str
    pod_set: str
    task_priority: int | None
    #: What the pod asks for (None when it cannot be read; ``invalid`` then says why).
    request: ResourceRequest | None
    #: Why the pod cannot be scheduled as defined (a bad annotation or quantity), else None.
    invalid: str | None
    node_selector: dict
    node_affinity: tuple
    pod_affinity: tuple
    pod_anti_affinity: tuple
    preferred_pod_affinity: tuple
    preferred_pod_anti_affinity: tuple
    tolerations: tuple
    #: The message of an existing ``PodScheduled=False`` condition (to skip writing it again).
    unschedulable_message: str | None
    nominated_node: str
    #: Shared GPU devices the binder gave the pod (its ``runai-gpu-group`` labels).
    gpu_groups: tuple
    #: ``status.qosClass`` and each container's requests (NUMA alignment).
    qos_class: str = ""
    containers: tuple = ()
    #: NUMA placement records: observed by the node, predicted by the scheduler; why one is ignored.
    numa_observed: tuple = ()
    numa_predicted: tuple = ()
    numa_invalid: str | None = None
    #: Host ports the pod binds (:func:`host_ports`).
    host_ports: tuple = ()
    #: ConfigMaps the pod needs (:func:`required_config_maps`).
    config_maps: tuple = ()
    #: PersistentVolumeClaims of a pending pod's volumes (:func:`kai.kube.storage.pod_claims`).
    claims: tuple = ()
    #: ResourceClaims of the pod (:func:`kai.kube.dra.pod_resource_claims`).
    resource_claims: tuple = ()

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def _container_requests(container: dict, where: str) -> dict[str, float]:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    # Extended resources may be set as limits only; their request is the limit.
    merged = {**{k: v for k, v in limits.items() if k not in IGNORED_RESOURCES}, **requests}
    return {name: quantity(value, f"{where}.resources {name}") for name, value in merged.items()}


def _add(total: dict[str, float], more: dict[str, float]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0.0) + value


def is_sidecar(container: dict) -> bool:
    """A native sidecar: an init container with ``restartPolicy: Always``, running beside the containers."""
    return container.get("restartPolicy") == "Always"


#: Each container with its requests (:func:`_container_requests`), the regular ones and the init ones.
Parsed = tuple[list[tuple[dict, dict[str, float]]], list[tuple[dict, dict[str, float]]]]


def _parse_containers(spec: dict) -> Parsed:
    """Each container's requests read once, for :func:`pod_amounts` and :func:`container_requests` both."""
    return ([(c, _container_requests(c, f"spec.containers[{i}]")) for i, c in enumerate(spec.get("containers") or ())],
            [(c, _container_requests(c, f"spec.initContainers[{i}]"))
             for i, c in enumerate(spec.get("initContainers") or ())])


def pod_amounts(spec: dict, parsed: Parsed | None = None) -> dict[str, float]:
    """What a pod needs, as the kubelet counts it (Kubernetes' ``PodRequests``), in base units by resource name.

    The containers and the native sidecars run together; each regular init container runs alone beside
    the sidecars declared before it; the pod needs the larger of the two, plus ``spec.overhead``.
    """
    containers, inits = parsed or _parse_containers(spec)
    amounts: dict[str, float] = {}
    for _, request in containers:
        _add(amounts, request)
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for c, request in inits:
        if is_sidecar(c):
            _add(sidecars, request)
            continue
        for name in request.keys() | sidecars.keys():
            init_peak[name] = max(init_peak.get(name, 0.0), request.get(name, 0.0) + sidecars.get(name, 0.0))
    _add(amounts, sidecars)
    for name, value in init_peak.items():
        amounts[name] = max(amounts.get(name, 0.0), value)
    for name, value in (spec.get("overhead") or {}).items():
        amounts[name] = amounts.get(name, 0.0) + quantity(value, f"spec.overhead {name}")
    return amounts


def container_requests(spec: dict, parsed: Parsed | None = None) -> tuple[ContainerRequest, ...]:
    """Each container's requests in the scheduler's units (CPU millicores): init containers first, in order."""
    containers, inits = parsed or _parse_containers(spec)
    out = []
    for group, init in ((inits, True), (containers, False)):
        for c, amounts in group:
            if "cpu" in amounts:
                amounts = {**amounts, "cpu": amounts["cpu"] * 1000.0}
            out.append(ContainerRequest(amounts, init, init and is_sidecar(c), str(c.get("name") or "")))
    return tuple(out)


def _numa_records(annotations: dict) -> tuple[tuple, tuple, str | None]:
    observed, why_observed = placement_annotation(annotations, NUMA_PLACEMENT_OBSERVED_ANNOTATION)
    predicted, why_predicted = placement_annotation(annotations, NUMA_PLACEMENT_PREDICTED_ANNOTATION)
    return observed, predicted, why_observed or why_predicted


def pod_request(spec: dict, annotations: dict, parsed: Parsed | None = None) -> ResourceRequest:
    """KAI's pod request: :func:`pod_amounts` with the GPU-sharing annotations read.

    Raises ValueError (GpuRequestError for the GPU-sharing annotations) naming the field at fault.
    """
    amounts = pod_amounts(spec, parsed)
    gpus = amounts.pop(GPU, 0.0)
    if gpus != int(gpus):
        raise ValueError(f"resource {GPU}={gpus:g} is not a whole number of GPUs")
    fraction, devices, memory_mib = parse_gpu_sharing(annotations, gpus)
    mig = {k: int(v) for k, v in amounts.items() if k.startswith(MIG_PREFIX)}
    scalars = {k: v for k, v in amounts.items() if k not in IGNORED_RESOURCES and not k.startswith(MIG_PREFIX)}
    return ResourceRequest(
        cpu=amounts.get("cpu", 0.0) * 1000.0, memory=amounts.get("memory", 0.0), gpus=int(gpus),
        gpu_fraction=fraction, gpu_devices=devices, gpu_memory_mib=memory_mib, mig=mig, scalars=scalars,
    )


def host_ports(spec: dict) -> tuple[HostPort, ...]:
    """The host ports a pod binds: those of its containers and native sidecars (as kube-scheduler counts them)."""
    containers = [c for c in spec.get("initContainers") or () if is_sidecar(c)] + list(spec.get("containers") or ())
    ports = []
    for c in containers:
        for p in c.get("ports") or ():
            port = p.get("hostPort")
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                ports.append(HostPort(str(p.get("hostIP") or ANY_IP), str(p.get("protocol") or "TCP"), port))
    return tuple(dict.fromkeys(ports))


def required_config_maps(spec: dict, annotations: dict) -> tuple[str, ...]:
    """ConfigMaps a pod cannot start without (KAI's rule): those of mounted volumes (projected ones too) and
    of environment references, unless optional or the pod's own shared-GPU ConfigMaps."""
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ()),
                  *(spec.get("ephemeralContainers") or ())]
    mounted = {m.get("name") for c in containers for m in c.get("volumeMounts") or ()}
    refs: list[dict] = []
    for volume in spec.get("volumes") or ():
        if volume.get("name") not in mounted:
            continue
        refs.append(volume.get("configMap") or {})
        refs.extend(source.get("configMap") or {} for source in (volume.get("projected") or {}).get("sources") or ())
    for c in containers:
        refs.extend(((e.get("valueFrom") or {}).get("configMapKeyRef") or {}) for e in c.get("env") or ())
        refs.extend(e.get("configMapRef") or {} for e in c.get("envFrom") or ())
    shared = annotations.get(SHARED_GPU_CONFIGMAP)
    names = {str(r["name"]) for r in refs if r.get("name") and r.get("optional") is not True}
    return tuple(sorted(n for n in names if not (shared is not None and n.startswith(shared))))


def _requirement(expr: dict) -> LabelRequirement:
    return LabelRequirement(str(expr.get("key", "")), str(expr.get("operator", "")),
                            tuple(str(v) for v in expr.get("values") or ()))


def _selector(sel) -> LabelSelector:
    sel = sel or {}
    return LabelSelector(tuple(sorted(_strings(sel.get("matchLabels")).items())),
                         tuple(_requirement(e) for e in sel.get("matchExpressions") or ()))


def _affinity_term(t: dict) -> PodAffinityTerm:
    return PodAffinityTerm(_selector(t.get("labelSelector")), str(t.get("topologyKey", "")),
                           tuple(t.get("namespaces") or ()))


def _affinity_terms(block) -> tuple[PodAffinityTerm, ...]:
    terms = (block or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(_affinity_term(t) for t in terms)


def _preferred_terms(block) -> tuple[WeightedPodAffinityTerm, ...]:
    terms = (block or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(WeightedPodAffinityTerm(int(t.get("weight") or 0), _affinity_term(t.get("podAffinityTerm") or {}))
                 for t in terms if isinstance(t, dict) and isinstance(t.get("weight"), int))


def pod_view(raw: dict, scheduler_name: str = SCHEDULER_NAME) -> PodView | None:
    """The view of a pod the scheduler must know: its own pods, and other pods that hold a node."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    scheduler = spec.get("schedulerName") or "default-scheduler"
    node_name = spec.get("nodeName") or ""
    phase = status.get("phase") or "Pending"
    if scheduler != scheduler_name and (not node_name or phase in ("Succeeded", "Failed")):
        return None
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    invalid, request = None, None
    containers: tuple[ContainerRequest, ...] = ()
    try:
        parsed = _parse_containers(spec)
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
        request=request, invalid=invalid, node_selector=_strings(spec.get("nodeSelector")),
        node_affinity=tuple(tuple(_requirement(e) for e in term.get("matchExpressions") or ()) for term in node_terms),
        pod_affinity=_affinity_terms(affinity.get("podAffinity")) if affinity else (),
        pod_anti_affinity=_affinity_terms(affinity.get("podAntiAffinity")) if affinity else (),
        preferred_pod_affinity=_preferred_terms(affinity.get("podAffinity")) if affinity else (),
        preferred_pod_anti_affinity=_preferred_terms(affinity.get("podAntiAffinity")) if affinity else (),
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


def _gpu_groups(labels: dict) -> tuple[str, ...]:
    groups = [labels[GPU_GROUP_LABEL]] if GPU_GROUP_LABEL in labels else []
    groups += sorted(k[len(GPU_GROUP_LABEL) + 1:] for k in labels if k.startswith(GPU_GROUP_LABEL + "/"))
    return tuple(dict.fromkeys(groups))


@attrs.frozen(slots=True)
class NodeView:
    name: str
    labels: dict
    taints: tuple
    allocatable: Resources
    max_pods: int
    unschedulable: bool
    ready: bool
    gpu_memory_mib: int
    #: Why the node's allocatable could not be read (the node is then left out), else None.
    invalid: str | None = None


def node_view(raw: dict) -> NodeView:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    labels = _strings(meta.get("labels"))
    invalid = None
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
class PodGroupView:
    key: str
    namespace: str
    name: str
    uid: str
    queue: str
    priority_class: str
    preemptibility: str
    min_member: int
    #: (name, minMember, parent, topology constraint, minSubGroup) of each ``spec.subGroups`` entry.
    sub_groups: tuple
    min_subgroup: int | None
    topology: TopologyConstraint | None
    created: float
    last_start: float | None
    stale_since: float | None
    last_eviction: float | None
    preemption_delay: float | None
    staleness_grace_period: float | None
    mark_unschedulable: bool
    #: ``status.schedulingConditions`` as found (the scheduler appends to them).
    conditions: tuple
    #: What is malformed in the spec (the field is ignored), or "".
    invalid: str = ""


def _topology(tc) -> TopologyConstraint | None:
    if not isinstance(tc, dict) or not tc.get("topology"):
        return None
    return TopologyConstraint(str(tc["topology"]), tc.get("requiredTopologyLevel") or None,
                              tc.get("preferredTopologyLevel") or None)


def podgroup_view(raw: dict) -> PodGroupView:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    conditions = tuple(c for c in status.get("schedulingConditions") or () if isinstance(c, dict))
    min_member = spec.get("minMember")
    invalid: list[str] = []
    return PodGroupView(
        key=f"{ns}/{name}", namespace=ns, name=name, uid=meta.get("uid", ""), queue=str(spec.get("queue") or ""),
        priority_class=str(spec.get("priorityClassName") or ""),
        preemptibility=str(spec.get("preemptibility") or labels.get(PREEMPTIBILITY_LABEL) or ""),
        min_member=max(int(min_member), 1) if isinstance(min_member, int) else 1,
        sub_groups=tuple(
            (str(sg.get("name") or ""), int(sg.get("minMember") or 0), sg.get("parent"),
             _topology(sg.get("topologyConstraint")), _whole(sg.get("minSubGroup")))
            for sg in spec.get("subGroups") or () if isinstance(sg, dict)
        ),
        min_subgroup=_whole(spec.get("minSubGroup")),
        topology=_topology(spec.get("topologyConstraint")),
        created=timestamp(meta.get("creationTimestamp")) or 0.0,
        last_start=timestamp(annotations.get(LAST_START_ANNOTATION)),
        stale_since=timestamp(annotations.get(STALE_ANNOTATION)),
        last_eviction=timestamp(annotations.get(LAST_EVICTION_ANNOTATION)),
        preemption_delay=_duration(spec, "preemptionDelay", invalid),
        staleness_grace_period=_duration(spec, "stalenessGracePeriod", invalid),
        mark_unschedulable=spec.get("markUnschedulable") is not False,
        conditions=conditions,
        invalid="; ".join(invalid),
    )


def _whole(value) -> int | None:
    """A count that is not negative, else None (the CRD refuses anything else)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _duration(spec: dict, field: str, invalid: list[str]) -> float | None:
    """Seconds of a Go duration field of ``spec`` (None when unset); a malformed one is noted in ``invalid``."""
    value = spec.get(field)
    if value is None:
        return None
    try:
        return parse_duration(value, f"spec.{field}")
    except ValueError as exc:
        invalid.append(f"{exc}; the field is ignored")
        return None


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
    gpu_groups: tuple
    #: ``spec.predictedNUMAZones``: the NUMA placement the scheduler chose (empty when unreadable).
    numa_zones: tuple = ()
    #: ``spec.resourceClaimAllocations``: (pod claim entry, :class:`kai.api.dra.Allocation`); empty when unreadable.
    claim_allocations: tuple = ()
    #: ``spec.extendedResourceClaimAllocation`` (:class:`kai.api.dra.ExtendedClaim`), None when absent or unreadable.
    extended_claim: object = None


def bindrequest_view(raw: dict) -> BindRequestView:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    owner: dict = next((o for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"), {})
    phase = str(status.get("phase") or "")
    limit = spec.get("backoffLimit")
    attempts = status.get("failedAttempts") or 0
    failed = phase == "Failed" and (not isinstance(limit, int) or attempts >= limit)
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    return BindRequestView(f"{ns}/{name}", ns, name, str(spec.get("podName") or ""), str(owner.get("uid") or ""),
                           str(spec.get("selectedNode") or ""), phase, failed,
                           tuple(str(g) for g in spec.get("selectedGPUGroups") or ()), _predicted_zones(spec),
                           *_claims(spec, ns, str(spec.get("podName") or "")))


def _claims(spec: dict, namespace: str, pod: str) -> tuple:
    try:
        return claim_allocations(spec), extended_claim(spec, namespace, pod)
    except (ValueError, TypeError, AttributeError):
        return (), None  # the binder fails such a BindRequest; the claims' own status tells


def _predicted_zones(spec: dict) -> tuple:
    if not spec.get("predictedNUMAZones"):
        return ()
    try:
        return placement_record(spec["predictedNUMAZones"], "spec.predictedNUMAZones")
    except ValueError:
        return ()  # the pod's annotations still tell


def queue_view(raw: dict) -> Queue:
    """A Queue's spec as a domain object (copied per cycle by :func:`to_queue`)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    resources = spec.get("resources") or {}

    def quota(res: str, scale: float) -> QuotaSpec:
        r = resources.get(res) or {}

        def amount(key: str) -> float:
            value = float(r.get(key, 0) or 0)
            return UNLIMITED if value == UNLIMITED else value * scale

        weight = r.get("overQuotaWeight")
        return QuotaSpec(amount("quota"), amount("limit"), float(1 if weight is None else weight))

    priority = spec.get("priority")
    return Queue(
        name=meta.get("name", ""), parent=spec.get("parentQueue") or None,
        priority=int(priority) if isinstance(priority, int) else 100,
        gpu=quota("gpu", 1.0), cpu=quota("cpu", 1.0), memory=quota("memory", QUEUE_MEMORY_UNIT),
        creation=timestamp(meta.get("creationTimestamp")) or 0.0,
        preempt_min_runtime=go_duration(spec.get("preemptMinRuntime")),
        reclaim_min_runtime=go_duration(spec.get("reclaimMinRuntime")),
        display_name=str(spec.get("displayName") or ""),
    )


def priority_class_view(raw: dict) -> tuple[str, int, bool]:
    """(name, value, globalDefault) of a PriorityClass."""
    return ((raw.get("metadata") or {}).get("name", ""), int(raw.get("value") or 0), bool(raw.get("globalDefault")))


def topology_view(raw: dict) -> Topology:
    """A Topology: its levels' node-label keys from the widest level to the narrowest."""
    levels = [lv for lv in (raw.get("spec") or {}).get("levels") or () if isinstance(lv, dict)]
    return Topology((raw.get("metadata") or {}).get("name", ""), tuple(str(lv.get("nodeLabel", "")) for lv in levels),
                    {str(lv["alias"]): str(lv.get("nodeLabel", "")) for lv in levels if lv.get("alias")})


def config_map_view(raw: dict) -> str:
    """A ConfigMap as its ``namespace/name`` alone: the scheduler only asks whether one exists."""
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def job_priority(pg: PodGroupView, classes: dict[str, int], default: int) -> int:
    """The PodGroup's priority class value, else the global default class's, else 50."""
    return classes.get(pg.priority_class, default)


def is_preemptible(pg: PodGroupView, priority: int) -> bool:
    """``spec.preemptibility`` (or the preemptibility label) when set, else priority below 100."""
    if pg.preemptibility == PREEMPTIBLE:
        return True
    if pg.preemptibility == NON_PREEMPTIBLE:
        return False
    return priority < PREEMPTIBLE_BELOW
