"""NUMA facts: a node's kubelet Topology Manager view (from its NodeResourceTopology) and a pod's NUMA placement.

Amounts are keyed by Kubernetes resource name in the scheduler's units: ``cpu`` in millicores,
``memory`` in bytes, devices (``nvidia.com/gpu`` ...) and hugepages as counts/bytes. Zones are kept
in the kubelet's order of preference (ascending NUMA node id), so zone *index* = position.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

#: kubelet ``topologyManagerPolicy`` values.
POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED = "none", "best-effort", "restricted"
POLICY_SINGLE = "single-numa-node"
POLICIES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE)
#: kubelet ``topologyManagerScope`` values.
SCOPE_CONTAINER, SCOPE_POD = "container", "pod"
SCOPES = (SCOPE_CONTAINER, SCOPE_POD)
#: Pod QoS classes (``status.qosClass``); only Guaranteed pods get NUMA-aligned CPU and memory.
GUARANTEED = "Guaranteed"
QOS_CLASSES = (GUARANTEED, "Burstable", "BestEffort")

_TRAILING_NUMBER = re.compile(r"(\d+)$")


@attrs.define(slots=True, frozen=True)
class NumaZone:
    """One NUMA node: its id (the NRT zone name), static ``allocatable`` and reported ``available`` amounts."""

    id: str
    allocatable: dict[str, float]
    available: dict[str, float]


@attrs.define(slots=True, frozen=True)
class NumaTopology:
    """A node's Topology Manager policy and scope and its NUMA zones, in index order."""

    policy: str
    scope: str
    zones: tuple[NumaZone, ...]

    @classmethod
    def of(cls, policy: str, scope: str, zones: Iterable[NumaZone]) -> NumaTopology:
        """A topology with ``zones`` in the kubelet's order: by the NUMA node number ending the zone id (numbered
        zones first), then by id."""
        return cls(policy, scope, tuple(sorted(zones, key=_zone_key)))

    def zone_index(self, zone_id: str) -> int | None:
        for i, zone in enumerate(self.zones):
            if zone.id == zone_id:
                return i
        return None


def _zone_key(zone: NumaZone) -> tuple[int, int, str]:
    m = _TRAILING_NUMBER.search(zone.id)
    return (0, int(m.group(1)), zone.id) if m else (1, 0, zone.id)


@attrs.define(slots=True, frozen=True)
class ZonePlacement:
    """The amounts of a pod placed on one NUMA zone (by zone id)."""

    zone: str
    amounts: dict[str, float]


@attrs.define(slots=True, frozen=True)
class ContainerRequest:
    """One container's requests by resource name; ``init`` for an init container, ``sidecar`` for a native
    sidecar (an init container that keeps running, ``restartPolicy: Always``)."""

    amounts: dict[str, float]
    init: bool = False
    sidecar: bool = False
    name: str = ""
