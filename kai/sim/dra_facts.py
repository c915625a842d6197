"""DRA facts of a conformance scenario (a project extension of the scenario format).

Device classes and a node's ``devices`` have the shapes of the cluster file and are read by its code
(:func:`kai.sim.cluster_nodes.device_classes`, :func:`kai.sim.cluster_nodes.node_slices`). ``resource_claims``
lists ResourceClaims by name, each one request like a cluster file's claim, with ``labels`` and, when the
claim is allocated, ``allocation: {node, devices}`` and its consumers: ``reserved_for`` (pods of the
scenario) and ``other_consumers`` (how many consumers outside it). A task names the claims it uses in its
``resource_claims``. :func:`claim_statuses` writes a round's claim allocations back into the facts.
"""

from __future__ import annotations

from typing import Any

from kai.api.dra import Allocation, DeviceId, DynamicResources, PodResourceClaim, ResourceClaim, ResourceSlice
from kai.common.yamlfile import Fields, describe
from kai.sim.cluster_nodes import device_classes, node_slices
from kai.sim.cluster_workloads import CLAIM_FIELDS, claim_request

#: The fields of an entry of ``resource_claims``.
SCENARIO_CLAIM_FIELDS = (*[f for f in CLAIM_FIELDS if f != "shared"], "labels", "allocation", "reserved_for",
                         "other_consumers")
ALLOCATION_FIELDS = ("node", "devices")
#: KAI's ``ExactDeviceRequest.count`` is an int64.
MAX_CLAIM_COUNT = 2**63 - 1


class ScenarioDRA:
    """The device classes, slices and claims of one scenario's facts."""

    def __init__(self, where: str, namespace: str, classes: Any):
        self.where = where
        self.namespace = namespace
        self.classes = device_classes(f"{where}:", classes)
        self.slices: list[ResourceSlice] = []
        self.claims: dict[str, ResourceClaim] = {}

    def add_devices(self, node: str, entries: list, where: str) -> None:
        self.slices.extend(node_slices(node, entries, where))

    def read_claims(self, items: Any) -> None:
        f = Fields({"resource_claims": items}, self.where)
        names = {c.name for c in self.classes}
        for i, item in enumerate(f.sequence("resource_claims", [])):
            where = f"{self.where}: resource_claims[{i}]"
            c, request = claim_request(item, where, names, SCENARIO_CLAIM_FIELDS, MAX_CLAIM_COUNT)
            name = c.get("name", str)
            if name in self.claims:
                raise c.fail("name", f"names claim {describe(name)} a second time")
            consumers = [self._uid(n) for n in c.names("reserved_for")]
            consumers += [f"consumer-{k}" for k in range(c.whole("other_consumers", 0, 0, MAX_CLAIM_COUNT))]
            self.claims[name] = ResourceClaim(self.namespace, name, (request,), self._allocation(c),
                                              tuple(consumers), c.labels("labels"))

    def _allocation(self, c: Fields) -> Allocation | None:
        if not c.has("allocation"):
            return None
        a = Fields(c.data["allocation"], f"{c.where}: allocation", ALLOCATION_FIELDS)
        node = a.text("node")
        devices: list[DeviceId] = []
        for name in a.names("devices"):
            found = [(s.driver, s.pool, name) for s in self.slices
                     if s.node == node and any(d.name == name for d in s.devices)]
            if not found:
                raise a.fail("devices", f"names {describe(name)}, not a device of node {describe(node)}")
            devices.append(found[0])
        return Allocation(tuple(("devices", d) for d in devices), node=node)

    def _uid(self, pod: str) -> str:
        return f"{self.namespace}/{pod}"

    def pod_claims(self, f: Fields, key: str) -> tuple[PodResourceClaim, ...]:
        """The claims a task names (each by its own name, as a pod's ``resourceClaimName``)."""
        out = []
        for name in f.names(key) if f.has(key) else ():
            if name not in self.claims:
                raise f.fail(key, f"names unknown resource claim {describe(name)}")
            out.append(PodResourceClaim(name, name))
        return tuple(out)

    def gpus(self, claims: tuple[PodResourceClaim, ...]) -> int:
        return sum(self.claims[c.claim].gpus for c in claims)

    def resources(self) -> DynamicResources | None:
        if not (self.classes or self.slices or self.claims):
            return None
        return DynamicResources.of(self.classes, self.slices, self.claims.values())


def claim_statuses(data: dict, placed: dict[str, tuple[str, ...]], session_allocation) -> None:
    """Write each claim's allocation and consumers after a round into the facts ``data``. ``placed`` maps each
    pod of the scenario to the claims it holds in the next round (none when it is not placed then). A claim's
    consumers are those pods and its consumers outside the scenario; it keeps the allocation the session holds
    (``session_allocation(name)``, None: none) while it has a consumer, or when it was allocated without any."""
    for item in data.get("resource_claims") or []:
        name = item["name"]
        outside = [n for n in item.get("reserved_for") or [] if n not in placed]
        reserved = outside + [pod for pod, claims in placed.items() if name in claims]
        allocation = session_allocation(name)
        unreserved = item.get("allocation") is not None and not item.get("reserved_for")
        if allocation is not None and (reserved or item.get("other_consumers") or unreserved):
            item["allocation"] = {"node": allocation.node, "devices": [d for _, (_, _, d) in allocation.devices]}
        else:
            item.pop("allocation", None)
        if reserved:
            item["reserved_for"] = reserved
        else:
            item.pop("reserved_for", None)
