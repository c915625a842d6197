"""The structured-parameters allocator, for the claims of one pod on one node.

Kubernetes' rules (``k8s.io/dynamic-resource-allocation/structured``) as far as they are covered: a
request of a claim is met by devices of slices reachable from the node (node-local slices of that
node, network-attached slices for all nodes or whose node selector admits it) that match every CEL
selector of its device class and of the request. ``ExactCount`` takes ``count`` free devices,
``All`` every matching device, which must then all be free (and at least one must match). A request
with admin access may take devices in use and takes them from no one. No device serves two requests
of the pod. Requests are met in order, with backtracking over the choices of earlier ones.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from kai.sdk import (
    ALL_DEVICES,
    ClaimAllocation,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ResourceClaim,
    ResourceSlice,
)

from .cel import Selectors

#: Most devices the search tries for one pod on one node before it gives up (the allocator's budget).
MAX_STEPS = 10_000


@attrs.define(slots=True, frozen=True)
class Candidate:
    id: DeviceId
    device: Device
    slice: ResourceSlice


def reachable(slices: Iterable[ResourceSlice], node: str, labels: dict[str, str]) -> list[Candidate]:
    """The devices of ``slices`` a pod on ``node`` can use, in slice and device order."""
    return [Candidate((s.driver, s.pool, d.name), d, s) for s in slices if s.reachable_from(node, labels)
            for d in s.devices]


class Search:
    """One attempt to allocate ``claims`` among ``candidates`` with the devices ``in_use`` taken."""

    def __init__(self, claims: list[ResourceClaim], classes: dict[str, DeviceClass], candidates: list[Candidate],
                 in_use: Collection[DeviceId], selectors: Selectors):
        self.requests = [(c, r) for c in claims for r in c.requests]
        self.classes = classes
        self.in_use = in_use
        self.matching: list[list[Candidate]] = []
        for _, request in self.requests:
            expressions = classes[request.device_class].selectors + request.selectors
            self.matching.append([d for d in candidates
                                  if all(selectors.matches(e, d.id, d.device) for e in expressions)])
        self.steps = 0
        self.picked: set[DeviceId] = set()
        self.choice: list[list[Candidate]] = [[] for _ in self.requests]

    def run(self) -> bool:
        return self._meet(0)

    def _free(self, k: int) -> list[Candidate]:
        admin = self.requests[k][1].admin_access
        return [d for d in self.matching[k] if d.id not in self.picked and (admin or d.id not in self.in_use)]

    def _meet(self, k: int) -> bool:
        if k == len(self.requests):
            return True
        request = self.requests[k][1]
        if request.allocation_mode == ALL_DEVICES:
            free = self._free(k)
            if not free or len(free) < len(self.matching[k]):
                return False
            return self._take(k, free)
        return self._pick(k, self._free(k), 0, max(request.count, 1))

    def _pick(self, k: int, free: list[Candidate], start: int, missing: int) -> bool:
        if missing == 0:
            return self._meet(k + 1)
        for i in range(start, len(free) - missing + 1):
            self.steps += 1
            if self.steps > MAX_STEPS:
                return False
            device = free[i]
            self.picked.add(device.id)
            self.choice[k].append(device)
            if self._pick(k, free, i + 1, missing - 1):
                return True
            self.choice[k].pop()
            self.picked.discard(device.id)
        return False

    def _take(self, k: int, devices: list[Candidate]) -> bool:
        self.choice[k] = list(devices)
        self.picked.update(d.id for d in devices)
        if self._meet(k + 1):
            return True
        self.picked.difference_update(d.id for d in devices)
        self.choice[k] = []
        return False

    def allocations(self, node: str) -> dict[str, ClaimAllocation]:
        """The allocation of each claim after a successful :meth:`run` (claim key -> allocation)."""
        per_claim: dict[str, list[tuple[DeviceRequest, Candidate]]] = {}
        for (claim, request), devices in zip(self.requests, self.choice, strict=True):
            per_claim.setdefault(claim.key, []).extend((request, d) for d in devices)
        out = {}
        for key, chosen in per_claim.items():
            everywhere = all(d.slice.all_nodes for _, d in chosen)
            out[key] = ClaimAllocation(
                tuple((r.name, d.id) for r, d in chosen), None if everywhere else node,
                admin=frozenset(d.id for r, d in chosen if r.admin_access))
        return out

    def reason(self, namespace: str, selectors: Selectors) -> str:
        """Why the search failed, naming the first request that cannot be met (or the combination)."""
        for k, (claim, request) in enumerate(self.requests):
            matching = self.matching[k]
            free = [d for d in matching if request.admin_access or d.id not in self.in_use]
            wanted = max(request.count, 1)
            head = f"claim {namespace}/{claim.name} request {request.name}"
            if not matching:
                expressions = (*self.classes[request.device_class].selectors, *request.selectors)
                errors = [selectors.errors[e] for e in expressions if e in selectors.errors]
                why = f": {errors[0]}" if errors else ""
                return f"{head}: no device of class {request.device_class} on the node matches{why}"
            if request.allocation_mode == ALL_DEVICES and len(free) < len(matching):
                return (f"{head}: asks for all {len(matching)} matching devices, "
                        f"{len(matching) - len(free)} of them in use")
            if request.allocation_mode != ALL_DEVICES and len(free) < wanted:
                return (f"{head}: needs {wanted} devices of class {request.device_class}, "
                        f"{len(matching)} match on the node and {len(free)} of them are free")
        if self.steps > MAX_STEPS:
            return "the pod's claims are too many to allocate together (the search gave up)"
        return "the devices on the node cannot meet all of the pod's claims together"

