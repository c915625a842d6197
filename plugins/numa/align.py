"""How the kubelet Topology Manager would align a request on a node's NUMA zones.

A :class:`Ledger` holds one node's zones as the session sees them (``available`` is charged and
credited as tasks are placed and evicted). :func:`solve` decides whether the node can align a
task's alignment units under the node's policy and, when asked, where each amount goes:

* ``single-numa-node``: every unit in one zone, the lowest that holds it;
* ``restricted``: every requested resource's preferred width (the fewest zones whose *allocatable*
  covers it) must agree, and the lowest mask of that width must hold the unit in its *available*;
* ``best-effort``: never rejects; greedily the zone covering the most of what is still missing,
  so the placement (its span) feeds scoring and the ledger.

The units are concurrent (app containers and native sidecars, drawn one after the other) and serial
(init containers, each checked alone against the zones as they are).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

from kai.sdk import POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE, NumaTopology, ZonePlacement

log = logging.getLogger("kai.plugins.numa")

#: Policies the plugin filters on (it predicts the kubelet's rejection).
MODELED = frozenset({POLICY_SINGLE, POLICY_RESTRICTED})
#: Policies it keeps a ledger for and scores: the filtering ones and best-effort.
SCORED = MODELED | {POLICY_BEST_EFFORT}
#: Most zone masks the restricted policy tries for one unit (all of them up to 14 zones): a node with more
#: zones than the kubelet's Topology Manager handles (8 by default) does not make a predicate unbounded.
MAX_MASKS = 4096
#: Slack for comparing summed amounts.
_SLACK = 1e-9

Amounts = dict[str, float]
#: Zone index -> amounts placed there.
Allocation = dict[int, Amounts]


def qos_gated(name: str) -> bool:
    """Resources the kubelet aligns only for Guaranteed pods (CPU Manager, Memory Manager)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


class Ledger:
    """One node's NUMA zones during a session: the aligned resources and each zone's availability."""

    __slots__ = ("topology", "policy", "scope", "names", "devices", "allocatable", "available", "prefix", "index")

    def __init__(self, topology: NumaTopology, ignore: frozenset[str], reconstruct: bool):
        self.topology = topology
        self.policy, self.scope = topology.policy, topology.scope
        reported = {n for z in topology.zones for n in (*z.allocatable, *z.available)}
        #: The resources the kubelet aligns on this node, and those of them aligned for every QoS class.
        self.names = tuple(sorted(reported - ignore))
        self.devices = tuple(n for n in self.names if not qos_gated(n))
        self.allocatable = [dict(z.allocatable) for z in topology.zones]
        self.available = [dict(z.allocatable if reconstruct else z.available) for z in topology.zones]
        #: Per resource: the sums of the 1, 2, ... largest zone allocatables (the restricted policy's widths).
        self.prefix = {n: list(itertools.accumulate(sorted((a.get(n, 0.0) for a in self.allocatable), reverse=True)))
                       for n in self.names}
        self.index = {z.id: i for i, z in enumerate(topology.zones)}

    @property
    def modeled(self) -> bool:
        return self.policy in MODELED

    def placement_of(self, record: Sequence[ZonePlacement]) -> tuple[ZonePlacement, ...]:
        """A recorded placement in zone order; empty when it names a zone the node does not have (never a
        partial placement: it would credit too little)."""
        if any(zp.zone not in self.index for zp in record):
            return ()
        return tuple(sorted(record, key=lambda zp: self.index[zp.zone]))

    def placement(self, alloc: Allocation) -> tuple[ZonePlacement, ...]:
        zones = self.topology.zones
        return tuple(ZonePlacement(zones[z].id, alloc[z]) for z in sorted(alloc))

    def charge(self, placement: Sequence[ZonePlacement], sign: float) -> None:
        """Take (``sign=-1``) or give back (``1``) a placement's amounts from the zones' availability."""
        for zp in placement:
            z = self.index.get(zp.zone)
            if z is None:
                log.error("numa: zone %s of a placement is not on the node", zp.zone)
                continue
            zone = self.available[z]
            for name, amount in zp.amounts.items():
                zone[name] = zone.get(name, 0.0) + sign * amount

    def free(self, z: int, name: str, consumed: list[Amounts] | None) -> float:
        v = self.available[z].get(name, 0.0)
        return v - consumed[z].get(name, 0.0) if consumed is not None else v


def solve(ledger: Ledger, names: Sequence[str], concurrent: Sequence[Amounts], serial: Sequence[Amounts],
          alloc: Allocation | None) -> bool:
    """Whether the node aligns every unit; with ``alloc``, record where the concurrent units' amounts go."""
    consumed: list[Amounts] | None = None
    last = len(concurrent) - 1
    for i, req in enumerate(concurrent):
        mask = fit(ledger, names, req, consumed)
        if mask is None:
            return False
        if i == last and alloc is None:
            continue
        if consumed is None and i != last:
            consumed = [{} for _ in ledger.available]
        _draw(ledger, names, mask, req, consumed, alloc)
    return all(fit(ledger, names, req, None) is not None for req in serial)


def fit(ledger: Ledger, names: Sequence[str], req: Amounts, consumed: list[Amounts] | None) -> list[int] | None:
    """The zone mask the node's policy would pick for one unit, or None when it cannot align it."""
    if ledger.policy == POLICY_SINGLE:
        return _lowest_zone(ledger, names, req, consumed)
    if ledger.policy == POLICY_BEST_EFFORT:
        return _greedy(ledger, names, req, consumed)
    return _restricted(ledger, names, req, consumed)


def _fits_mask(ledger: Ledger, names: Sequence[str], req: Amounts, consumed: list[Amounts] | None,
               mask: Sequence[int]) -> bool:
    for n in names:
        need = req.get(n, 0.0)
        if need > 0 and sum(ledger.free(z, n, consumed) for z in mask) + _SLACK < need:
            return False
    return True


def _lowest_zone(ledger: Ledger, names: Sequence[str], req: Amounts,
                 consumed: list[Amounts] | None) -> list[int] | None:
    for z in range(len(ledger.available)):
        if _fits_mask(ledger, names, req, consumed, (z,)):
            return [z]
    return None


def _greedy(ledger: Ledger, names: Sequence[str], req: Amounts, consumed: list[Amounts] | None) -> list[int] | None:
    remaining = {n: req.get(n, 0.0) for n in names}
    mask: list[int] = []
    zones = range(len(ledger.available))
    while len(mask) < len(zones):
        if all(r <= 0 for r in remaining.values()):
            return mask
        best, best_cover = -1, 0.0
        for z in zones:
            if z in mask:
                continue
            cover = sum(min(r, ledger.free(z, n, consumed)) for n, r in remaining.items() if r > 0)
            if cover > best_cover:
                best, best_cover = z, cover
        if best < 0:
            break
        mask.append(best)
        for n in remaining:
            remaining[n] -= ledger.free(best, n, consumed)
    return mask if all(r <= _SLACK for r in remaining.values()) else None


def _restricted(ledger: Ledger, names: Sequence[str], req: Amounts,
                consumed: list[Amounts] | None) -> list[int] | None:
    width = 0
    for n in names:
        need = req.get(n, 0.0)
        if need <= 0:
            continue
        prefix = ledger.prefix[n]
        k = next((k + 1 for k, total in enumerate(prefix) if total + _SLACK >= need), 0)
        if not k or (width and k != width):
            return None  # more than the node has, or the resources' preferred widths disagree
        width = k
    if not width:
        return []
    masks = itertools.combinations(range(len(ledger.available)), width)
    for mask in itertools.islice(masks, MAX_MASKS):
        if _fits_mask(ledger, names, req, consumed, mask):
            return list(mask)
    return None


def _draw(ledger: Ledger, names: Sequence[str], mask: Sequence[int], req: Amounts, consumed: list[Amounts] | None,
          alloc: Allocation | None) -> None:
    """Take the unit from its mask, lowest zone first, into ``consumed`` and ``alloc``."""
    for n in names:
        remaining = req.get(n, 0.0)
        for z in mask:
            if remaining <= 0:
                break
            take = min(ledger.free(z, n, consumed), remaining)
            if take <= 0:
                continue
            if consumed is not None:
                consumed[z][n] = consumed[z].get(n, 0.0) + take
            if alloc is not None:
                zone = alloc.setdefault(z, {})
                zone[n] = zone.get(n, 0.0) + take
            remaining -= take
