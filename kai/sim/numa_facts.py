"""NUMA fields of scenario and cluster files: a node's ``numa`` topology and a task's ``numa_placement``.

```yaml
numa:
  policy: single-numa-node      # single-numa-node | restricted | best-effort | none
  scope: pod                    # pod | container
  zones:                        # NUMA zones in index order
    - id: zone-0
      allocatable: {cpu_millis: 4000, memory_bytes: 8000000000, gpus: 2}
      available: {cpu_millis: 1000}   # as the node's exporter reports it (default: allocatable)
numa_placement: {zone-0: {cpu_millis: 3000}}   # a placed task's observed placement, zone id -> amounts
```
"""

from __future__ import annotations

from typing import Any

from kai.api import GPU, NumaTopology, NumaZone, ZonePlacement
from kai.api.numa import POLICIES, SCOPES
from kai.common.yamlfile import Fields, describe

#: File field -> resource name, in the file's units (CPU millicores, memory bytes, whole GPUs).
AMOUNT_FIELDS = {"cpu_millis": "cpu", "memory_bytes": "memory", "gpus": GPU}
RESOURCE_FIELDS = {v: k for k, v in AMOUNT_FIELDS.items()}
#: Most zones a node may have (the kubelet's Topology Manager handles 8 by default).
MAX_ZONES = 16


def amounts(f: Fields, key: Any) -> dict[str, float]:
    """A mapping of amount fields (``cpu_millis``, ``memory_bytes``, ``gpus``) by resource name; ``key`` is a
    field's name or a zone's index."""
    block = Fields(f.mapping(key), f"{f.where}: {key}", known=AMOUNT_FIELDS, error=f.error)
    return {AMOUNT_FIELDS[k]: float(block.number(k, minimum=0)) for k in block.data}


def numa_topology(f: Fields, key: str = "numa") -> NumaTopology | None:
    """The node's NUMA topology of field ``key``; None when it is not set."""
    if not f.has(key):
        return None
    t = f.entry(key, known=("policy", "scope", "zones"))
    items = t.sequence("zones")
    if not 0 < len(items) <= MAX_ZONES:
        raise t.fail("zones", f"must list 1 to {MAX_ZONES} zones, not {len(items)}")
    zones: list[NumaZone] = []
    for i, item in enumerate(items):
        z = Fields(item, f"{t.where}: zones[{i}]", known=("id", "allocatable", "available"), error=f.error)
        allocatable = amounts(z, "allocatable")
        zone = NumaZone(z.text("id"), allocatable, amounts(z, "available") if z.has("available") else dict(allocatable))
        if any(zone.id == other.id for other in zones):
            raise z.fail("id", f"{describe(zone.id)} is listed twice")
        zones.append(zone)
    return NumaTopology(t.text("policy", choices=POLICIES), t.text("scope", "container", choices=SCOPES), tuple(zones))


def numa_placement(f: Fields, key: str = "numa_placement") -> tuple[ZonePlacement, ...]:
    """A task's recorded placement of field ``key`` (zone id -> amounts); empty when it is not set."""
    if not f.has(key):
        return ()
    block = Fields(f.mapping(key), f"{f.where}: {key}", error=f.error)
    return tuple(ZonePlacement(str(zone), amounts(block, zone)) for zone in block.data)


def placement_data(placement: Any) -> dict[str, dict[str, float]]:
    """A placement as file data (the inverse of :func:`numa_placement`)."""
    return {zp.zone: {RESOURCE_FIELDS.get(n, n): v for n, v in zp.amounts.items()} for zp in placement or ()}
