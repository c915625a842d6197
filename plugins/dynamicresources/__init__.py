"""``dynamicresources``: place pods whose ResourceClaims can be allocated (KAI v0.17's DRA plugin).

* ``kai_pre_predicate``: every claim of the pod exists (a template's claim is generated), has room in
  ``reservedFor`` (counting the pods the session placed with it), a GPU claim the pod names directly carries
  the queue label of the pod's queue (KAI's rule for shared GPU claims), and each request of a claim still
  to allocate names an existing device class whose selectors compile.
* ``kai_predicate``: on the node, the claims already allocated are reachable and the others can be
  allocated from the free devices reachable from it (:mod:`.allocator`); the fit error names the claim,
  the request and why no device matched.
* ``kai_on_allocate`` / ``kai_on_deallocate``: the session's ledger of claim allocations. A placed pod
  allocates its claims that are not allocated yet (a claim shared by several pods is allocated once);
  when the last pod holding a claim leaves (eviction, rollback), its devices are free again. A pod
  placed again gets the devices it had, so statements restore the ledger exactly. A placed pod's
  ``claim_allocations`` name its claims' allocations for the binder.

A claim allocated before the session keeps its devices; it is freed only when every pod holding it is
evicted.

DRA-backed ``nvidia.com/gpu`` (KEP-5004): on a node whose GPUs are published only through DRA and backed by
a device class with that ``extendedResourceName`` (``DynamicResources.extended_gpu_nodes``), a pod asking
whole GPUs gets an implicit claim with Kubernetes' requests (:mod:`.extended`: init containers reuse the
containers' devices), allocated like any other; its ``extended_claim`` carries it to the binder. A shared-GPU
pod does not fit such a node.

The plugin steps out of the session when no pod has claims and no node's GPUs are DRA-backed.
"""

from __future__ import annotations

import logging

from kai.sdk import (
    ACTIVE_USED,
    EXTENDED_ENTRY,
    GPU_RESOURCE,
    QUEUE_LABEL,
    RESERVED_FOR_MAX,
    ClaimAllocation,
    DeviceId,
    DeviceRequest,
    DynamicResources,
    ExtendedClaim,
    JobsKey,
    Reject,
    ResourceClaim,
    Task,
    hookimpl,
    is_gpu_name,
    jobs_where,
)

from .allocator import Candidate, Search, reachable
from .cel import Selectors
from .extended import implicit_requests

NAME = "dynamicresources"
#: The memo key of the jobs with ResourceClaims as built.
WITH_CLAIMS = JobsKey("dynamicresources/claims")
log = logging.getLogger("kai.plugins.dynamicresources")


class Ledger:
    """Claim allocations and the devices they take, kept current through the allocation events."""

    def __init__(self, dra: DynamicResources):
        self.allocations: dict[str, ClaimAllocation] = {}
        #: Who holds each allocated claim: UIDs of the session's placed pods and of consumers outside it.
        self.holders: dict[str, set[str]] = {}
        self.in_use: dict[DeviceId, str] = {}
        #: The allocation a pod's claim last had in the session (pod UID, claim key) -> allocation.
        self.remembered: dict[tuple[str, str], ClaimAllocation] = {}
        for key, claim in dra.claims.items():
            if claim.allocation is not None:
                self.allocations[key] = claim.allocation
                # a claim allocated but not reserved (a pending BindRequest's) stays allocated
                self.holders[key] = {f"reserved:{uid}" for uid in claim.reserved_for} or {"allocated"}
                self._take(key, claim.allocation)

    def _take(self, key: str, allocation: ClaimAllocation) -> None:
        for device in allocation.taken:
            self.in_use[device] = key

    def hold(self, key: str, uid: str, allocation: ClaimAllocation | None) -> None:
        if key not in self.allocations:
            if allocation is None:
                return
            self.allocations[key] = allocation
            self._take(key, allocation)
            self.holders[key] = set()
        self.holders[key].add(uid)
        self.remembered[(uid, key)] = self.allocations[key]

    def release(self, key: str, uid: str) -> None:
        holders = self.holders.get(key)
        if holders is None:
            return
        holders.discard(uid)
        holders.discard(f"reserved:{uid}")
        if not holders:
            for device in self.allocations.pop(key).taken:
                self.in_use.pop(device, None)
            del self.holders[key]

    def free(self, allocation: ClaimAllocation) -> bool:
        return not any(d in self.in_use for d in allocation.taken)


def _has_resource_claims(job) -> bool:
    return any(t.resource_claims for t in job.tasks.values())


class DynamicResourcesPlugin:
    name = NAME

    def __init__(self) -> None:
        self._reset(DynamicResources())

    def _reset(self, dra: DynamicResources) -> None:
        self.dra = dra
        self.ledger = Ledger(dra)
        self.selectors = Selectors()
        self.candidates: dict[str, list[Candidate]] = {}
        #: Implicit claims for DRA-backed ``nvidia.com/gpu`` by (pod, device class).
        self.extended: dict[tuple[str, str], ResourceClaim] = {}
        self.conditions: dict[str, Reject | None] = {}

    @hookimpl
    def kai_session_open(self, session):
        self._reset(session.snapshot.dra)
        with_claims = jobs_where(session, WITH_CLAIMS, _has_resource_claims)
        if not self.dra.extended_gpu_nodes and not with_claims:
            session.calls.withdraw(self)  # no pod has claims, no GPU is DRA-backed: nothing to filter or account
            return
        for uid, job in session.jobs.items():
            if uid not in with_claims:
                continue
            for task in job.tasks.values():
                if task.resource_claims and task.status in ACTIVE_USED:
                    for claim in self._claims(task):
                        if claim is not None and claim.key in self.ledger.allocations:
                            self.ledger.hold(claim.key, task.uid, None)

    @hookimpl
    def kai_session_job_added(self, session, job):
        if any(t.resource_claims for t in job.tasks.values()) or (
                self.dra.extended_gpu_nodes and any(t.request.gpus for t in job.tasks.values())):
            return Reject(NAME, "resource claims are followed from the session's start only")
        return None

    def _claims(self, task: Task) -> list[ResourceClaim | None]:
        return [self.dra.claim_of(task.namespace, c) for c in task.resource_claims]

    def _extended(self, task: Task, node_name: str) -> ResourceClaim | None:
        """The implicit claim of a pod asking whole GPUs on a node whose ``nvidia.com/gpu`` is DRA-backed."""
        device_class = self.dra.extended_gpu_nodes.get(node_name)
        if device_class is None or task.request.gpus <= 0 or task.request.is_shared_gpu \
                or any(c.name == EXTENDED_ENTRY for c in task.resource_claims):
            return None
        key = (task.uid, device_class)
        claim = self.extended.get(key)
        if claim is None:
            gpus = implicit_requests(task.containers, GPU_RESOURCE)[0] or [("container-0-request-0", task.request.gpus)]
            requests = tuple(DeviceRequest(name, device_class, count=n) for name, n in gpus)
            claim = self.extended[key] = ResourceClaim(task.namespace, f"{EXTENDED_ENTRY}{task.name}", requests,
                                                       extended_for=task.uid)
        return claim

    def _mappings(self, task: Task, claim: ResourceClaim) -> tuple[tuple[str, str, str], ...]:
        mappings = implicit_requests(task.containers, GPU_RESOURCE)[1]
        return tuple((container, GPU_RESOURCE, request) for container, request in mappings) or tuple(
            ("", GPU_RESOURCE, r.name) for r in claim.requests)

    # --- filtering ------------------------------------------------------------------------------------

    @hookimpl
    def kai_pre_predicate(self, session, task, job):
        if not task.resource_claims:
            return None
        if task.uid not in self.conditions:
            self.conditions[task.uid] = self._condition(task, job.queue)
        return self.conditions[task.uid] or self._consumers_full(task)

    def _consumers_full(self, task: Task) -> Reject | None:
        """A claim the pod does not hold yet whose ``reservedFor`` is full, counting the pods the session
        placed with it."""
        for claim in self._claims(task):
            if claim is None:
                continue
            consumers = set(claim.reserved_for) | {
                h for h in self.ledger.holders.get(claim.key, ()) if not h.startswith("reserved:") and h != "allocated"}
            if len(consumers) >= RESERVED_FOR_MAX and task.uid not in consumers:
                return Reject(NAME, f"resource claim {claim.key} has reached its maximum number of consumers "
                                    f"({RESERVED_FOR_MAX})")
        return None

    def _condition(self, task: Task, queue: str) -> Reject | None:
        for pod_claim, claim in zip(task.resource_claims, self._claims(task), strict=True):
            if claim is None:
                if pod_claim.claim:
                    what = f"resource claim {task.namespace}/{pod_claim.claim} does not exist"
                elif f"{task.namespace}/{pod_claim.template}" in self.dra.templates:
                    what = f"the claim of template {pod_claim.template} is not generated yet"
                else:
                    what = f"resource claim template {task.namespace}/{pod_claim.template} does not exist"
                return Reject(NAME, f"pod {task.namespace}/{task.name}: {what}")
            if not pod_claim.template and any(is_gpu_name(r.device_class) for r in claim.requests):
                label = claim.labels.get(QUEUE_LABEL, "")
                if label != queue:
                    why = (f"has queue label {QUEUE_LABEL}={label}, not the pod's queue {queue}" if label
                           else f"has no queue label {QUEUE_LABEL}")
                    return Reject(NAME, f"pod {task.namespace}/{task.name}: shared GPU claim {claim.key} {why}")
            if claim.allocation is not None:
                continue
            for request in claim.requests:
                device_class = self.dra.classes.get(request.device_class)
                if device_class is None:
                    return Reject(NAME, f"device class {request.device_class} does not exist for claim "
                                        f"{claim.key} request {request.name}")
                for expression in device_class.selectors + request.selectors:
                    error = self.selectors.compile(expression)
                    if error is not None:
                        return Reject(NAME, f"claim {claim.key} request {request.name}: {error}")
        return None

    @hookimpl
    def kai_nodes_alike(self, session, task, job):
        # A GPU pod is filtered by node where some node's GPUs are DRA-backed (its implicit claim, or no sharing).
        req = task.request
        return not task.resource_claims and not (self.dra.extended_gpu_nodes and (req.gpus > 0 or req.is_shared_gpu))

    @hookimpl
    def kai_predicate(self, session, task, job, node):
        if task.request.is_shared_gpu and node.name in self.dra.extended_gpu_nodes:
            return Reject(NAME, f"node {node.name} publishes its GPUs through DRA only; GPU sharing is not "
                                "supported there")
        extended = self._extended(task, node.name)
        if not task.resource_claims and extended is None:
            return None
        labels = node.node.labels
        pending = [extended] if extended is not None else []
        for claim in self._claims(task):
            if claim is None:
                return Reject(NAME, f"pod {task.namespace}/{task.name} has a claim that does not exist")
            allocation = self.ledger.allocations.get(claim.key)
            if allocation is None:
                pending.append(claim)
            elif not allocation.reachable_from(node.name, labels):
                return Reject(NAME, f"claim {claim.key} is allocated to devices not reachable from node "
                                    f"{node.name}")
        if not pending:
            return None
        search = self._search(pending, node)
        if search.run():
            return None
        return Reject(NAME, f"cannot allocate DRA claims on node {node.name}: "
                            f"{search.reason(task.namespace, self.selectors)}")

    def _search(self, claims: list[ResourceClaim], node) -> Search:
        candidates = self.candidates.get(node.name)
        if candidates is None:
            candidates = self.candidates[node.name] = reachable(self.dra.slices, node.name, node.node.labels)
        return Search(claims, self.dra.classes, candidates, self.ledger.in_use, self.selectors)

    # --- the ledger -----------------------------------------------------------------------------------

    @hookimpl
    def kai_on_allocate(self, session, task, node):
        extended = self._extended(task, node.name) if node is not None else None
        if (not task.resource_claims and extended is None) or node is None:
            return
        claims = [c for c in self._claims(task) if c is not None]
        if extended is not None:
            claims.append(extended)
        pending = []
        for claim in claims:
            if claim.key in self.ledger.allocations:
                self.ledger.hold(claim.key, task.uid, None)
                continue
            before = self.ledger.remembered.get((task.uid, claim.key))
            if before is not None and before.reachable_from(node.name, node.node.labels) and self.ledger.free(before):
                self.ledger.hold(claim.key, task.uid, before)
            else:
                pending.append(claim)
        if pending:
            search = self._search(pending, node)
            if search.run():
                for key, allocation in search.allocations(node.name).items():
                    self.ledger.hold(key, task.uid, allocation)
            else:
                log.error("dynamicresources: the claims of pod %s cannot be allocated on node %s: %s", task.uid,
                          node.name, search.reason(task.namespace, self.selectors))
        task.claim_allocations = tuple(
            (entry.name, self.ledger.allocations[f"{task.namespace}/{entry.claim}"]) for entry in task.resource_claims
            if entry.claim and f"{task.namespace}/{entry.claim}" in self.ledger.allocations)
        if extended is not None and extended.key in self.ledger.allocations:
            task.extended_claim = ExtendedClaim(extended, self.ledger.allocations[extended.key],
                                                self._mappings(task, extended))

    @hookimpl
    def kai_on_deallocate(self, session, task, node):
        if task.extended_claim is not None:
            self.ledger.release(task.extended_claim.claim.key, task.uid)
            task.extended_claim = None
        if not task.resource_claims:
            return
        task.claim_allocations = ()
        for claim in self._claims(task):
            if claim is not None:
                self.ledger.release(claim.key, task.uid)

    def allocation(self, namespace: str, claim: str) -> ClaimAllocation | None:
        """The allocation the session holds for claim ``namespace/claim`` (None: not allocated)."""
        return self.ledger.allocations.get(f"{namespace}/{claim}")


def build(arguments):
    return DynamicResourcesPlugin()
