"""``numa``: place pods where the kubelet's Topology Manager will NUMA-align them (KAI v0.17).

A node takes part when it has a NUMA topology (its NodeResourceTopology) with policy
``single-numa-node`` or ``restricted`` (filtered and scored) or ``best-effort`` (scored only); nodes
with policy ``none`` or no topology are never filtered. A task takes part when its pod is Guaranteed
(CPU, memory and hugepages are aligned only then) or it asks for a device the node reports per zone.

* ``kai_predicate``: a node that cannot align the task under its policy is infeasible.
* ``kai_node_scores``: ``SCORE / span``, the number of zones the task is expected to occupy (a node
  without topology counts the most zones any node has, one with policy ``none`` all its zones).
* ``kai_on_allocate`` / ``kai_on_deallocate``: a placed task gets its zones, the lowest that align it
  (``task.numa_placement``, recorded on its BindRequest), and the node's per-zone ledger is charged;
  eviction and rollback give them back, so statements keep the ledger exact.

At session open each placed pod's recorded placement (observed by the node, else predicted at bind)
is taken as its placement, and with ``reconstructAvailable`` (default) each zone's availability is
its allocatable minus the recorded placements of the pods holding it, ignoring the reported
availability, which lags. Arguments: ``ignoreList`` (resources reported per zone that the kubelet
does not align, comma-separated or a list), ``reconstructAvailable`` (bool).
"""

from __future__ import annotations

from collections.abc import Sequence

from kai.sdk import ACTIVE_ALLOCATED, ACTIVE_USED, GUARANTEED, POLICY_NONE, Reject, Task, hookimpl

from .align import SCORED, Allocation, Ledger, log, solve
from .units import Units, units_of

#: Most a node scores (one zone): above the resource-type and placement scores, below node availability,
#: as in KAI's score ranks.
SCORE = 50.0
NOT_ALIGNED = "node cannot NUMA-align the pod's resources under its Topology Manager policy"


class Numa:
    name = "numa"

    def __init__(self, ignore: frozenset[str] = frozenset(), reconstruct: bool = True):
        self.ignore = ignore
        self.reconstruct = reconstruct
        self.reject = Reject(self.name, NOT_ALIGNED)
        self._reset()

    def _reset(self) -> None:
        #: Node name -> ledger, for the nodes whose policy the plugin models or scores.
        self.ledgers: dict[str, Ledger] = {}
        #: Whether some node's policy filters; the most zones of any node (0: no node has a topology).
        self.filtering = False
        self.max_zones = 0
        #: Device resources some scored node aligns for every QoS class.
        self.devices: frozenset[str] = frozenset()
        self.units: dict[str, Units] = {}

    # --- session ------------------------------------------------------------------------------------

    @hookimpl
    def kai_session_open(self, session):
        self._reset()
        devices: set[str] = set()
        ledger: Ledger | None
        for n in session.nodes:
            topology = n.node.numa
            if topology is None or not topology.zones:
                continue
            self.max_zones = max(self.max_zones, len(topology.zones))
            if topology.policy in SCORED:
                ledger = self.ledgers[n.name] = Ledger(topology, self.ignore, self.reconstruct)
                self.filtering |= ledger.modeled
                devices.update(ledger.devices)
        self.devices = frozenset(devices)
        if not self.max_zones:
            session.calls.withdraw(self)  # no node has NUMA data: nothing to filter, score or account
            return
        for job in session.jobs.values():
            for task in job.tasks.values():
                ledger = self.ledgers.get(task.node) if task.status in ACTIVE_USED else None
                if ledger is not None and self._handles(task, ledger):
                    session.keep(task)
                    task.numa_placement = ledger.placement_of(task.numa_recorded)
        if self.reconstruct:
            for name, ledger in self.ledgers.items():
                for task in session.node_by_name[name].tasks.values():
                    if task.status in ACTIVE_ALLOCATED:
                        ledger.charge(ledger.placement_of(task.numa_recorded), -1.0)

    def zones_available(self, node: str) -> list[dict[str, float]] | None:
        """Each zone's availability on ``node`` as the last session left it; None for a node without a ledger."""
        ledger = self.ledgers.get(node)
        return None if ledger is None else [dict(z) for z in ledger.available]

    # --- filtering and scoring ------------------------------------------------------------------------

    @hookimpl
    def kai_nodes_alike(self, task):
        return not self._wants(task)  # a task no node's NUMA ledger handles is neither filtered nor scored

    @hookimpl
    def kai_predicate(self, session, task, job, node):
        if not self.filtering:
            return None
        ledger = self.ledgers.get(node.name)
        if ledger is None or not ledger.modeled or not self._handles(task, ledger):
            return None
        return None if self._solve(task, ledger, None) else self.reject

    @hookimpl
    def kai_node_scores(self, session, task, nodes):
        if not self.max_zones or not self._wants(task):
            return None
        return [self._score(task, n.name, n.node.numa) for n in nodes]

    def _score(self, task: Task, name: str, topology) -> float:
        if topology is None or not topology.zones:
            return SCORE / self.max_zones
        ledger = self.ledgers.get(name)
        if topology.policy == POLICY_NONE or ledger is None or not self._handles(task, ledger):
            return SCORE / len(topology.zones)
        alloc: Allocation = {}
        if not self._solve(task, ledger, alloc):
            return 0.0
        return SCORE / max(len(alloc), 1)

    # --- the ledger -----------------------------------------------------------------------------------

    @hookimpl
    def kai_on_allocate(self, session, task, node):
        ledger = self.ledgers.get(node.name) if self.ledgers and node is not None else None
        if ledger is None:
            return
        if task.numa_placement is None:
            if not self._handles(task, ledger):
                return
            alloc: Allocation = {}
            if not self._solve(task, ledger, alloc):
                log.error("numa: task %s cannot be NUMA-aligned on node %s; it gets no NUMA placement",
                          task.uid, node.name)
                alloc = {}
            task.numa_placement = ledger.placement(alloc)
        ledger.charge(task.numa_placement, -1.0)

    @hookimpl
    def kai_on_deallocate(self, session, task, node):
        ledger = self.ledgers.get(node.name) if self.ledgers and node is not None else None
        if ledger is not None and task.numa_placement:
            ledger.charge(task.numa_placement, 1.0)

    # --- helpers --------------------------------------------------------------------------------------

    def _units(self, task: Task) -> Units:
        units = self.units.get(task.uid)
        if units is None:
            units = self.units[task.uid] = units_of(task)
        return units

    def _handles(self, task: Task, ledger: Ledger) -> bool:
        """Whether the kubelet aligns anything of the task on the ledger's node."""
        if task.qos_class == GUARANTEED:
            return True
        pod = self._units(task).pod
        return any(pod.get(n, 0.0) > 0 for n in ledger.devices)

    def _wants(self, task: Task) -> bool:
        if task.qos_class == GUARANTEED:
            return True
        pod = self._units(task).pod
        return any(pod.get(n, 0.0) > 0 for n in self.devices)

    def _solve(self, task: Task, ledger: Ledger, alloc: Allocation | None) -> bool:
        names = ledger.names if task.qos_class == GUARANTEED else ledger.devices
        concurrent, serial = self._units(task).for_scope(ledger.scope)
        return solve(ledger, names, concurrent, serial, alloc)


def _names(value, where: str) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(n.strip() for n in value.split(",") if n.strip())
    if isinstance(value, Sequence) and all(isinstance(n, str) for n in value):
        return frozenset(n.strip() for n in value if n.strip())
    raise ValueError(f"{where} must be a comma-separated string or a list of resource names, not {value!r}")


def build(arguments):
    reconstruct = arguments.get("reconstructAvailable", True)
    if isinstance(reconstruct, str) and reconstruct.strip().lower() in ("true", "false"):
        reconstruct = reconstruct.strip().lower() == "true"
    if not isinstance(reconstruct, bool):
        raise ValueError(f"reconstructAvailable must be true or false, not {reconstruct!r}")
    return Numa(_names(arguments.get("ignoreList", ""), "ignoreList"), reconstruct)
