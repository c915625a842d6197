"""Persistent storage as the scheduler sees it, and kube-scheduler's VolumeBinding rules over it.

The objects are slim records of PersistentVolumeClaims, PersistentVolumes, StorageClasses and
CSIStorageCapacities; :class:`Storage` holds one cycle's worth. The rules are pure functions shared by
the scheduler's ``predicates`` plugin and the binder: which claims a pod waits for
(:func:`claims_problem`, :func:`classify`), whether a node can serve the pod's claims
(:func:`node_reasons`) and which static volume a claim takes on a node (:func:`find_matching_volume`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from kai.api.selectors import LabelSelector, NodeSelectorTerm, terms_match

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
#: The provisioner of classes whose volumes are created by hand (static provisioning only).
NO_PROVISIONER = "kubernetes.io/no-provisioner"
#: Set on a claim to ask its provisioner for a volume reachable from that node.
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
#: Set by the PV controller once a claim's binding is complete.
BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
#: Set on a volume (or claim) whose binding a controller, not a user, made.
BOUND_BY_CONTROLLER_ANNOTATION = "pv.kubernetes.io/bound-by-controller"
#: The legacy class annotation, read before ``spec.storageClassName`` as Kubernetes does.
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"

# kube-scheduler's VolumeBinding reasons, word for word.
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@attrs.define(slots=True, frozen=True)
class PodClaim:
    """A claim a pod's volume uses: ``persistentVolumeClaim.claimName``, or ``<pod>-<volume>`` of an
    ephemeral volume, which must be controlled by the pod (``pod_uid``)."""

    name: str
    ephemeral: bool = False
    pod_uid: str = ""


@attrs.define(slots=True, frozen=True)
class Claim:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str = ""
    #: The class name ("" for none); the beta annotation wins over ``spec.storageClassName``.
    storage_class: str = ""
    #: ``spec.resources.requests.storage`` in bytes (0 when not set).
    request: float = 0.0
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    selector: LabelSelector | None = None
    #: ``spec.volumeName``: the volume the claim is (or is being) bound to.
    volume_name: str = ""
    bind_completed: bool = False
    selected_node: str | None = None
    phase: str = "Pending"
    deleting: bool = False
    #: UID of the pod controlling the claim (ephemeral volumes' claims), "" if none.
    controller_pod: str = ""
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Fully bound, as kube-scheduler counts it: a volume named and the binding completed."""
        return bool(self.volume_name) and self.bind_completed


@attrs.define(slots=True, frozen=True)
class Volume:
    """A PersistentVolume."""

    name: str
    storage_class: str = ""
    capacity: float = 0.0
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    #: ``spec.nodeAffinity.required``; None: reachable from every node.
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    labels: dict[str, str] = attrs.field(factory=dict)
    #: ``spec.claimRef`` as (namespace, name, uid); None when the volume is free.
    claim_ref: tuple[str, str, str] | None = None
    phase: str = "Available"
    deleting: bool = False

    def bound_to(self, claim: Claim) -> bool:
        ref = self.claim_ref
        return ref is not None and ref[0] == claim.namespace and ref[1] == claim.name and ref[2] in ("", claim.uid)


@attrs.define(slots=True, frozen=True)
class StorageClass:
    name: str
    provisioner: str = ""
    #: ``volumeBindingMode``; the API server defaults it to Immediate.
    binding_mode: str = "Immediate"
    #: ``allowedTopologies`` as node selector terms; None: every node.
    allowed_topologies: tuple[NodeSelectorTerm, ...] | None = None


@attrs.define(slots=True, frozen=True)
class StorageCapacity:
    """A CSIStorageCapacity: how much a class can still provision on the nodes its topology selects."""

    storage_class: str
    node_topology: LabelSelector | None = None
    capacity: float | None = None
    maximum_volume_size: float | None = None

    def fits(self, size: float, labels: dict[str, str]) -> bool:
        limit = self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity
        return (limit is not None and limit >= size and self.node_topology is not None
                and self.node_topology.matches(labels))


@attrs.define(eq=False)
class Storage:
    """The cluster's storage objects of one cycle."""

    #: Claims by ``namespace/name``.
    claims: dict[str, Claim] = attrs.field(factory=dict)
    #: Volumes by class name (volumes without a class under "").
    volumes: dict[str, list[Volume]] = attrs.field(factory=dict)
    classes: dict[str, StorageClass] = attrs.field(factory=dict)
    capacities: list[StorageCapacity] = attrs.field(factory=list)
    #: CSI drivers that publish CSIStorageCapacity (``spec.storageCapacity: true``).
    capacity_drivers: frozenset[str] = frozenset()

    @classmethod
    def of(cls, claims: Iterable[Claim] = (), volumes: Iterable[Volume] = (), classes: Iterable[StorageClass] = (),
           capacities: Iterable[StorageCapacity] = (), capacity_drivers: Iterable[str] = ()) -> Storage:
        by_class: dict[str, list[Volume]] = {}
        for v in volumes:
            by_class.setdefault(v.storage_class, []).append(v)
        return cls({c.key: c for c in claims}, by_class, {c.name: c for c in classes}, list(capacities),
                   frozenset(capacity_drivers))

    def volume(self, name: str) -> Volume | None:
        return next((v for vs in self.volumes.values() for v in vs if v.name == name), None)


@attrs.define(slots=True, frozen=True)
class PodClaims:
    """A pod's claims sorted as kube-scheduler sorts them (:func:`classify`)."""

    bound: tuple[Claim, ...] = ()
    #: Unbound claims of WaitForFirstConsumer classes: bound once a node is chosen.
    delayed: tuple[Claim, ...] = ()
    #: Unbound claims that the PV controller should have bound already (the pod waits).
    immediate: tuple[Claim, ...] = ()


def claims_problem(claims: Iterable[PodClaim], namespace: str, pod: str, storage: Storage) -> str | None:
    """kube-scheduler's reason a pod's claims keep it from scheduling anywhere, or None."""
    for ref in claims:
        claim = storage.claims.get(f"{namespace}/{ref.name}")
        if claim is None:
            if ref.ephemeral:
                return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{ref.name}"'
            return f'persistentvolumeclaim "{ref.name}" not found'
        if claim.phase == "Lost":
            return f'persistentvolumeclaim "{claim.name}" bound to non-existent persistentvolume "{claim.volume_name}"'
        if claim.deleting:
            return f'persistentvolumeclaim "{claim.name}" is being deleted'
        if ref.ephemeral and claim.controller_pod != ref.pod_uid:
            return f"PVC {claim.namespace}/{claim.name} was not created for pod {namespace}/{pod} (pod is not owner)"
    return None


def is_delayed(claim: Claim, storage: Storage) -> bool:
    """Whether the claim's class binds on first consumer (a missing class binds immediately)."""
    cls = storage.classes.get(claim.storage_class) if claim.storage_class else None
    return cls is not None and cls.binding_mode == WAIT_FOR_FIRST_CONSUMER


def classify(claims: Iterable[PodClaim], namespace: str, storage: Storage) -> PodClaims:
    """Bound, delayed and immediate claims of a pod whose :func:`claims_problem` is None."""
    bound, delayed, immediate = [], [], []
    for ref in claims:
        claim = storage.claims[f"{namespace}/{ref.name}"]
        if claim.bound:
            bound.append(claim)
        elif is_delayed(claim, storage) and not claim.volume_name:
            delayed.append(claim)
        else:  # pre-bound claims wait for the PV controller like immediate ones
            immediate.append(claim)
    return PodClaims(tuple(bound), tuple(delayed), tuple(immediate))


def find_matching_volume(claim: Claim, volumes: Iterable[Volume], node_name: str, labels: dict[str, str],
                         excluded: Collection[str] = ()) -> Volume | None:
    """The volume the claim would bind to on the node: one already bound to the claim, else the smallest
    available one of its class that is large enough, has its access modes and volume mode, matches its
    selector and is reachable from the node. ``excluded`` names volumes taken by other claims."""
    best: Volume | None = None
    for v in volumes:
        if v.name in excluded or v.capacity < claim.request or v.volume_mode != claim.volume_mode or v.deleting:
            continue
        reachable = terms_match(v.node_affinity, node_name, labels)
        if v.bound_to(claim):
            if reachable:
                return v
            continue
        if v.claim_ref is not None or v.phase != "Available":
            continue
        if claim.selector is not None and not claim.selector.matches(v.labels):
            continue
        if v.storage_class != claim.storage_class or not reachable:
            continue
        if not set(claim.access_modes) <= set(v.access_modes):
            continue
        if best is None or v.capacity < best.capacity:
            best = v
    return best


def has_capacity(claim: Claim, cls: StorageClass, labels: dict[str, str], storage: Storage) -> bool:
    """Whether a CSI driver that tracks capacity can provision the claim for the node (true for the others)."""
    if claim.request <= 0 or cls.provisioner not in storage.capacity_drivers:
        return True
    return any(c.storage_class == cls.name and c.fits(claim.request, labels) for c in storage.capacities)


def provisionable(claim: Claim, node_name: str, labels: dict[str, str], storage: Storage) -> tuple[bool, bool]:
    """(a volume can be provisioned for the claim on the node, there is room for it)."""
    cls = storage.classes.get(claim.storage_class)
    if cls is None or not cls.provisioner or cls.provisioner == NO_PROVISIONER:
        return False, True
    if not terms_match(cls.allowed_topologies, node_name, labels):
        return False, True
    return True, has_capacity(claim, cls, labels, storage)


def static_bindings(claims: Iterable[Claim], node_name: str, labels: dict[str, str], storage: Storage,
                    taken: Collection[str] = ()) -> tuple[dict[str, Volume], list[Claim]]:
    """The volumes the delayed claims without a selected node take on the node (smallest claims first), and
    the claims left to provision."""
    chosen: dict[str, Volume] = {}
    left: list[Claim] = []
    excluded = set(taken)
    for claim in sorted(claims, key=lambda c: c.request):
        volume = find_matching_volume(claim, storage.volumes.get(claim.storage_class, ()), node_name, labels, excluded)
        if volume is None:
            left.append(claim)
        else:
            chosen[claim.key] = volume
            excluded.add(volume.name)
    return chosen, left


def node_reasons(claims: PodClaims, node_name: str, labels: dict[str, str], storage: Storage,
                 taken: Collection[str] = ()) -> list[str]:
    """kube-scheduler's reasons the node cannot serve the pod's claims (empty: it can). ``taken`` names
    volumes other pods of the session already took."""
    reasons = []
    bound_ok, found = True, True
    for claim in claims.bound:
        volume = storage.volume(claim.volume_name)
        if volume is None:
            found = False
        elif not terms_match(volume.node_affinity, node_name, labels):
            bound_ok = False
    unbound_ok, room = True, True
    if claims.delayed and bound_ok and found:
        to_match = []
        for claim in claims.delayed:
            if claim.selected_node is None:
                to_match.append(claim)
            elif claim.selected_node != node_name:
                unbound_ok = False
        if unbound_ok:
            _, to_provision = static_bindings(to_match, node_name, labels, storage, taken)
            to_provision += [c for c in claims.delayed if c.selected_node is not None]
            for claim in to_provision:
                unbound_ok, room = provisionable(claim, node_name, labels, storage)
                if not (unbound_ok and room):
                    break
    if not bound_ok:
        reasons.append(NODE_CONFLICT)
    if not unbound_ok:
        reasons.append(BIND_CONFLICT)
    if not room:
        reasons.append(NOT_ENOUGH_SPACE)
    if not found:
        reasons.append(PV_NOT_EXIST)
    return reasons
