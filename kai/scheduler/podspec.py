"""What the scheduler reads of a pod spec: its requests as the kubelet counts them, each container's, the host
ports it binds, the ConfigMaps it needs and its affinity terms. Each function raises ValueError naming the field
at fault, or reads what it can."""

from __future__ import annotations

import functools
from typing import Any

from kai.api import (
    ANY_IP,
    GPU,
    MIG_PREFIX,
    ContainerRequest,
    HostPort,
    LabelRequirement,
    LabelSelector,
    PodAffinityTerm,
    ResourceRequest,
    WeightedPodAffinityTerm,
)
from kai.api.names import SHARED_GPU_CONFIGMAP
from kai.api.resources import parse_gpu_sharing
from kai.common.quantity import QuantityError, parse
from kai.kube.views import JsonObject, strings

#: Resources a pod or node has that are not extended resources of the request.
IGNORED_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage", "storage"})


@functools.lru_cache(maxsize=8192)
def _quantity(value: str) -> float:
    return float(parse(value))


def quantity(value: Any, where: str) -> float:
    """A Kubernetes quantity in base units; ValueError naming ``where`` when it is not one."""
    try:
        return _quantity(value) if isinstance(value, str) else float(parse(value))
    except (QuantityError, TypeError):
        raise ValueError(f"{where}: {value!r} is not a Kubernetes quantity") from None


def _container_requests(container: JsonObject, where: str) -> dict[str, float]:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    # Extended resources may be set as limits only; their request is the limit.
    merged = {**{k: v for k, v in limits.items() if k not in IGNORED_RESOURCES}, **requests}
    return {name: quantity(value, f"{where}.resources {name}") for name, value in merged.items()}


def _add(total: dict[str, float], more: dict[str, float]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0.0) + value


def is_sidecar(container: JsonObject) -> bool:
    """A native sidecar: an init container with ``restartPolicy: Always``, running beside the containers."""
    return container.get("restartPolicy") == "Always"


#: Each container with its requests (:func:`_container_requests`), the regular ones and the init ones.
Parsed = tuple[list[tuple[JsonObject, dict[str, float]]], list[tuple[JsonObject, dict[str, float]]]]


def parse_containers(spec: JsonObject) -> Parsed:
    """Each container's requests read once, for :func:`pod_amounts` and :func:`container_requests` both."""
    return ([(c, _container_requests(c, f"spec.containers[{i}]")) for i, c in enumerate(spec.get("containers") or ())],
            [(c, _container_requests(c, f"spec.initContainers[{i}]"))
             for i, c in enumerate(spec.get("initContainers") or ())])


def pod_amounts(spec: JsonObject, parsed: Parsed | None = None) -> dict[str, float]:
    """What a pod needs, as the kubelet counts it (Kubernetes' ``PodRequests``), in base units by resource name.

    The containers and the native sidecars run together; each regular init container runs alone beside
    the sidecars declared before it; the pod needs the larger of the two, plus ``spec.overhead``.
    """
    containers, inits = parsed or parse_containers(spec)
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


def container_requests(spec: JsonObject, parsed: Parsed | None = None) -> tuple[ContainerRequest, ...]:
    """Each container's requests in the scheduler's units (CPU millicores): init containers first, in order."""
    containers, inits = parsed or parse_containers(spec)
    out = []
    for group, init in ((inits, True), (containers, False)):
        for c, amounts in group:
            if "cpu" in amounts:
                amounts = {**amounts, "cpu": amounts["cpu"] * 1000.0}
            out.append(ContainerRequest(amounts, init, init and is_sidecar(c), str(c.get("name") or "")))
    return tuple(out)


def pod_request(spec: JsonObject, annotations: dict[str, str], parsed: Parsed | None = None) -> ResourceRequest:
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


def host_ports(spec: JsonObject) -> tuple[HostPort, ...]:
    """The host ports a pod binds: those of its containers and native sidecars (as kube-scheduler counts them)."""
    containers = [c for c in spec.get("initContainers") or () if is_sidecar(c)] + list(spec.get("containers") or ())
    ports = []
    for c in containers:
        for p in c.get("ports") or ():
            port = p.get("hostPort")
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                ports.append(HostPort(str(p.get("hostIP") or ANY_IP), str(p.get("protocol") or "TCP"), port))
    return tuple(dict.fromkeys(ports))


def required_config_maps(spec: JsonObject, annotations: dict[str, str]) -> tuple[str, ...]:
    """ConfigMaps a pod cannot start without (KAI's rule): those of mounted volumes (projected ones too) and
    of environment references, unless optional or the pod's own shared-GPU ConfigMaps."""
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ()),
                  *(spec.get("ephemeralContainers") or ())]
    mounted = {m.get("name") for c in containers for m in c.get("volumeMounts") or ()}
    refs: list[JsonObject] = []
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


def requirement(expr: JsonObject) -> LabelRequirement:
    return LabelRequirement(str(expr.get("key", "")), str(expr.get("operator", "")),
                            tuple(str(v) for v in expr.get("values") or ()))


def label_selector(sel: JsonObject | None) -> LabelSelector:
    """A label selector (matchLabels and matchExpressions); an empty or missing one matches every label set."""
    sel = sel or {}
    return LabelSelector(tuple(sorted(strings(sel.get("matchLabels")).items())),
                         tuple(requirement(e) for e in sel.get("matchExpressions") or ()))


def _affinity_term(t: JsonObject) -> PodAffinityTerm:
    return PodAffinityTerm(label_selector(t.get("labelSelector")), str(t.get("topologyKey", "")),
                           tuple(t.get("namespaces") or ()))


def affinity_terms(block: JsonObject | None) -> tuple[PodAffinityTerm, ...]:
    terms = (block or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(_affinity_term(t) for t in terms)


def preferred_terms(block: JsonObject | None) -> tuple[WeightedPodAffinityTerm, ...]:
    terms = (block or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(WeightedPodAffinityTerm(int(t.get("weight") or 0), _affinity_term(t.get("podAffinityTerm") or {}))
                 for t in terms if isinstance(t, dict) and isinstance(t.get("weight"), int))
