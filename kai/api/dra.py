"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the scheduler sees it.

Slim records of DeviceClasses, ResourceSlices and ResourceClaims, and :class:`DynamicResources`, which
holds one cycle's worth with the indices the ``dynamicresources`` plugin reads. A pod names its claims
in :attr:`kai.api.Task.resource_claims` (:class:`PodResourceClaim`): a claim of its namespace by name, or
the claim generated for it from a ResourceClaimTemplate. CEL selectors are kept as text here; the plugin
compiles them.

Quota follows KAI v0.17: a request for a device class whose name contains ``gpu`` asks for GPUs (its
count, one for ``All``), and the devices of node-local slices whose driver name contains ``gpu`` are
GPUs of the cluster.

DRA-backed extended resources (KEP-5004, as KAI v0.17 does them): a DeviceClass whose
``extendedResourceName`` is ``nvidia.com/gpu`` makes a node that has no ``nvidia.com/gpu`` of its own but
GPUs in its node-local slices a node of that many GPUs (:func:`kai.api.dranodes.back_extended_gpus`); a pod
asking ``nvidia.com/gpu`` there gets its GPUs through an implicit claim (:class:`ExtendedClaim`), which the
binder creates.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from kai.api.selectors import NodeSelectorTerm, terms_match

EXACT_COUNT = "ExactCount"
ALL = "All"
ALLOCATION_MODES = (EXACT_COUNT, ALL)
#: Most consumers ``status.reservedFor`` of a claim may list (``ResourceClaimReservedForMaxSize``).
RESERVED_FOR_MAX = 256
#: The GPU resource name (``kai.api.names.GPU``; kai.api.dra stands alone).
GPU_RESOURCE = "nvidia.com/gpu"
#: The entry name of a pod's implicit claim for DRA-backed extended resources (not a valid API name, as KAI's).
EXTENDED_ENTRY = "<extended-resources>"


def is_gpu_name(name: str) -> bool:
    """KAI's test for a GPU device class or a GPU driver: the name contains ``gpu``."""
    return "gpu" in name.lower()


@attrs.define(slots=True, frozen=True)
class DeviceClass:
    """A DeviceClass: CEL selectors every device allocated for it must match."""

    name: str
    selectors: tuple[str, ...] = ()
    #: ``spec.extendedResourceName``: pods asking this extended resource get devices of this class (KEP-5004).
    extended_resource_name: str = ""


@attrs.define(slots=True, frozen=True)
class Device:
    """A device of a slice: attributes and capacities by name (a name without a domain is the driver's)."""

    name: str
    attributes: dict[str, object] = attrs.field(factory=dict, hash=False)
    #: Capacity values in base units (Kubernetes quantities parsed).
    capacity: dict[str, float] = attrs.field(factory=dict, hash=False)


@attrs.define(slots=True, frozen=True)
class ResourceSlice:
    """A ResourceSlice: devices of one pool of a driver, on one node or reachable from several.

    Exactly one of ``node`` (node-local), ``all_nodes`` or ``node_selector`` (network-attached) says where.
    """

    name: str
    driver: str
    pool: str
    devices: tuple[Device, ...] = ()
    node: str | None = None
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] | None = None

    def reachable_from(self, node_name: str, labels: dict[str, str]) -> bool:
        if self.node is not None:
            return self.node == node_name
        if self.all_nodes:
            return True
        return self.node_selector is not None and terms_match(self.node_selector, node_name, labels)


@attrs.define(slots=True, frozen=True)
class DeviceRequest:
    """One request of a claim (``spec.devices.requests[].exactly``)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    allocation_mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False

    @property
    def gpus(self) -> int:
        """GPUs this request counts for the queue (KAI: its count, one for ``All``; none for other classes)."""
        if not is_gpu_name(self.device_class):
            return 0
        return max(self.count, 1) if self.allocation_mode == EXACT_COUNT else 1


#: A device's identity: (driver, pool, device name).
DeviceId = tuple[str, str, str]


@attrs.define(slots=True, frozen=True)
class Allocation:
    """A claim's ``status.allocation``: per request the devices it got, and where they are reachable from
    (``node``: only that node; else ``node_selector``, None reaching every node)."""

    devices: tuple[tuple[str, DeviceId], ...] = ()
    node: str | None = None
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    #: Devices allocated with admin access (they are not taken from anyone).
    admin: frozenset[DeviceId] = frozenset()

    def reachable_from(self, node_name: str, labels: dict[str, str]) -> bool:
        if self.node is not None:
            return self.node == node_name
        return terms_match(self.node_selector, node_name, labels)

    @property
    def taken(self) -> tuple[DeviceId, ...]:
        """The devices no other claim may have."""
        return tuple(d for _, d in self.devices if d not in self.admin)


@attrs.define(slots=True, frozen=True)
class ResourceClaim:
    """A ResourceClaim: its requests, and its allocation and consumers (pod UIDs) when it has them."""

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[str, ...] = ()
    labels: dict[str, str] = attrs.field(factory=dict, hash=False)
    #: Generated from a ResourceClaimTemplate for one pod (``resource.kubernetes.io/pod-claim-name``).
    from_template: bool = False
    #: The pod (``namespace/name``) this claim holds DRA-backed extended resources for; its GPUs are the pod's
    #: ``nvidia.com/gpu`` request, not counted again.
    extended_for: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        return 0 if self.extended_for else sum(r.gpus for r in self.requests)


@attrs.define(slots=True, frozen=True)
class ExtendedClaim:
    """The implicit claim of a pod placed on a node whose ``nvidia.com/gpu`` is DRA-backed: one request per
    container asking GPUs (``container-<i>-request-0``), its allocation, and (container, resource, request)
    mappings for the pod's ``status.extendedResourceClaimStatus``."""

    claim: ResourceClaim
    allocation: Allocation
    mappings: tuple[tuple[str, str, str], ...] = ()


@attrs.define(slots=True, frozen=True)
class PodResourceClaim:
    """An entry of a pod's ``spec.resourceClaims``: the claim it names directly, or (``template``) the claim
    generated for it from a template, named in the pod's ``status.resourceClaimStatuses`` ("" while the
    claim is not generated yet)."""

    name: str
    claim: str
    template: str = ""


@attrs.define(slots=True, eq=False)
class DynamicResources:
    """One cycle's DeviceClasses, ResourceSlices and ResourceClaims, and the ResourceClaimTemplates (each as
    the claim it generates, keyed ``namespace/template``)."""

    classes: dict[str, DeviceClass] = attrs.field(factory=dict)
    slices: tuple[ResourceSlice, ...] = ()
    claims: dict[str, ResourceClaim] = attrs.field(factory=dict)
    templates: dict[str, ResourceClaim] = attrs.field(factory=dict)
    #: Nodes whose ``nvidia.com/gpu`` is DRA-backed -> the device class backing it (:func:`back_extended_gpus`).
    extended_gpu_nodes: dict[str, str] = attrs.field(factory=dict)

    @classmethod
    def of(cls, classes: Iterable[DeviceClass] = (), slices: Iterable[ResourceSlice] = (),
           claims: Iterable[ResourceClaim] = (), templates: Iterable[ResourceClaim] = ()) -> DynamicResources:
        return cls({c.name: c for c in classes}, tuple(slices), {c.key: c for c in claims},
                   {t.key: t for t in templates})

    def __bool__(self) -> bool:
        return bool(self.slices or self.claims)

    def extended_class(self, resource: str) -> DeviceClass | None:
        """The device class backing extended resource ``resource`` (of two naming it, the last by name)."""
        found = [c for c in self.classes.values() if c.extended_resource_name == resource]
        return max(found, key=lambda c: c.name) if found else None

    def node_gpu_devices(self, node: str) -> int:
        return sum(len(s.devices) for s in self.slices if s.node == node and is_gpu_name(s.driver))

    def claim_of(self, namespace: str, pod_claim: PodResourceClaim) -> ResourceClaim | None:
        return self.claims.get(f"{namespace}/{pod_claim.claim}") if pod_claim.claim else None

    def requests_of(self, namespace: str, pod_claim: PodResourceClaim) -> ResourceClaim | None:
        """The claim a pod's entry names, or before it is generated the template's (for the GPUs it asks)."""
        claim = self.claim_of(namespace, pod_claim)
        if claim is None and pod_claim.template:
            return self.templates.get(f"{namespace}/{pod_claim.template}")
        return claim

    def gpu_devices(self, nodes: Iterable[str]) -> int:
        """GPUs of the cluster KAI's way: devices of node-local slices of a GPU driver on ``nodes``."""
        names = set(nodes) - self.extended_gpu_nodes.keys()  # those count their GPUs as nvidia.com/gpu already
        return sum(len(s.devices) for s in self.slices
                   if s.node is not None and s.node in names and is_gpu_name(s.driver))


def pod_gpus(claims: Iterable[ResourceClaim]) -> int:
    """The GPUs a pod's claims ask for (KAI's ``DraGpuCounts`` summed)."""
    return sum(c.gpus for c in claims)
