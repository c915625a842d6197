"""Load the simulator's cluster file: nodes, queues and workloads in a platform engineer's terms.

The format is documented in ``docs/simulate.md``. Quantities are Kubernetes quantities ("500m",
"64", "512Gi"); priorities are numbers or KAI's priority class names. Every error names the file,
the entry and the field, and unknown fields are errors (a typo must not be silently ignored). The
nodes are read by :mod:`kai.sim.cluster_nodes`, the workloads by :mod:`kai.sim.cluster_workloads`.
"""

from __future__ import annotations

from typing import Any

import attrs

from kai.api import (
    ACTIVE_USED,
    UNLIMITED,
    DisruptionBudget,
    Job,
    LabelSelector,
    Node,
    Queue,
    QuotaSpec,
    ResourceTypeQuota,
    Topology,
)
from kai.api.dra import DeviceClass, DynamicResources, ResourceClaim, ResourceSlice
from kai.common.durations import parse_duration
from kai.common.errors import ConfigError
from kai.common.yamlfile import MAX_NUMBER, describe
from kai.framework import DEFAULT_CONFIG, SchedulerConfig, Snapshot, build_snapshot, parse_config
from kai.sim.cluster_fields import MAX_CYCLES, MAX_PRIORITY, Entry, named, parse_quantity
from kai.sim.cluster_nodes import device_classes, parse_nodes, parse_topologies
from kai.sim.cluster_workloads import parse_jobs

TOP_FIELDS = ("name", "cycles", "config", "topologies", "device_classes", "nodes", "queues", "workloads",
              "disruption_budgets")
BUDGET_FIELDS = ("name", "selector", "disruptions_allowed")
QUEUE_FIELDS = ("name", "parent", "priority", "gpu", "cpu", "memory", "preempt_min_runtime", "reclaim_min_runtime",
                "resource_types")
RESOURCE_TYPE_FIELDS = ("name", "node_selector", "gpu")
QUOTA_FIELDS = ("deserved", "limit", "over_quota_weight")


@attrs.define
class ClusterFile:
    """The facts of a cluster file, as domain objects a snapshot is built from each cycle."""

    name: str
    file: str
    nodes: list[Node]
    queues: list[Queue]
    jobs: list[Job]
    config: SchedulerConfig = DEFAULT_CONFIG
    cycles: int = 1
    topologies: list[Topology] = attrs.field(factory=list)
    device_classes: list[DeviceClass] = attrs.field(factory=list)
    slices: list[ResourceSlice] = attrs.field(factory=list)
    claims: list[ResourceClaim] = attrs.field(factory=list)
    budgets: list[DisruptionBudget] = attrs.field(factory=list)

    def snapshot(self, now: float) -> Snapshot:
        return build_snapshot(self.nodes, self.queues, self.jobs, now, self.topologies, dra=self._dra(),
                              budgets=self.budgets)

    def _dra(self) -> DynamicResources | None:
        """The DRA objects, each claim allocated as the pods holding it got it in an earlier cycle."""
        if not (self.device_classes or self.slices or self.claims):
            return None
        claims = {c.key: c for c in self.claims}
        for job in self.jobs:
            for task in job.tasks.values():
                if task.status not in ACTIVE_USED:
                    continue
                entries = {c.name: c for c in task.resource_claims}
                for entry, allocation in task.claim_allocations:
                    key = f"{task.namespace}/{entries[entry].claim}"
                    claim = claims[key]
                    claims[key] = attrs.evolve(claim, allocation=claim.allocation or allocation,
                                               reserved_for=(*claim.reserved_for, task.uid))
        return DynamicResources.of(self.device_classes, self.slices, claims.values())


def parse_cluster(data: Any, file: str, now: float) -> ClusterFile:
    """Build the facts of a parsed cluster file (a mapping)."""
    top = Entry(data, file, TOP_FIELDS)
    slices: list[ResourceSlice] = []
    claims: list[ResourceClaim] = []
    nodes = parse_nodes(file, data.get("nodes"), slices)
    classes = device_classes(file, data.get("device_classes"))
    config = parse_config(data["config"], f"{file}: config") if top.has("config") else DEFAULT_CONFIG
    jobs = parse_jobs(file, data.get("workloads"), {n.name for n in nodes}, now, {c.name for c in classes}, claims)
    return ClusterFile(
        name=top.get("name", str, file), file=file, nodes=nodes, queues=parse_queues(file, data.get("queues")),
        jobs=jobs, config=config, cycles=top.count("cycles", 1, minimum=1, maximum=MAX_CYCLES),
        topologies=parse_topologies(file, data.get("topologies")), device_classes=classes, slices=slices, claims=claims,
        budgets=parse_budgets(file, data.get("disruption_budgets")),
    )


def parse_budgets(file: str, items: Any) -> list[DisruptionBudget]:
    """The PodDisruptionBudgets of ``disruption_budgets``: each covers the pods whose labels include its
    ``selector`` and allows ``disruptions_allowed`` disruptions every cycle."""
    budgets = []
    for where, item in named(items, file, "disruption_budgets"):
        e = Entry(item, where, BUDGET_FIELDS)
        selector = LabelSelector(tuple(sorted(e.labels("selector").items())))
        budgets.append(DisruptionBudget(e.get("name", str), "default", selector, e.count("disruptions_allowed", 0)))
    return budgets


def parse_queues(file: str, items: Any) -> list[Queue]:
    """The queues of a cluster file's ``queues`` list (also the queue file of a timed trace replay)."""
    queues = []
    for i, (where, item) in enumerate(named(items, file, "queues")):
        e = Entry(item, where, QUEUE_FIELDS)
        defaults = Queue("defaults")
        quotas: dict[str, Any] = {res: _quota(e, res, getattr(defaults, res)) for res in ("gpu", "cpu", "memory")}
        queues.append(Queue(e.get("name", str), e.get("parent", str, None),
                            e.whole("priority", 100, -MAX_PRIORITY, MAX_PRIORITY),
                            creation=float(i), preempt_min_runtime=_runtime(e, "preempt_min_runtime"),
                            reclaim_min_runtime=_runtime(e, "reclaim_min_runtime"),
                            resource_types=_resource_types(e), **quotas))
    return queues


def _resource_types(e: Entry) -> tuple[ResourceTypeQuota, ...]:
    """A queue's GPU quota per resource type: ``{name, node_selector, gpu: {deserved, limit, over_quota_weight}}``."""
    out = []
    for k, item in enumerate(e.sequence("resource_types", [])):
        t = Entry(item, f"{e.where}: resource_types[{k}]", RESOURCE_TYPE_FIELDS)
        out.append(ResourceTypeQuota(t.get("name", str), t.labels("node_selector"),
                                     _quota(t, "gpu", QuotaSpec(0.0, UNLIMITED, 1.0))))
    return tuple(out)


def _runtime(e: Entry, key: str) -> float | None:
    """A queue's min runtime (a duration like ``10m``), or None when not set."""
    if not e.has(key):
        return None
    try:
        value = parse_duration(e.data[key], f"{e.where}: field '{key}'")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not 0 <= value <= MAX_NUMBER:
        raise e.fail(key, f"must be a duration from 0 to {MAX_NUMBER:g} seconds, not {describe(e.data[key])}")
    return value


def _quota(e: Entry, resource: str, default: QuotaSpec) -> QuotaSpec:
    if not e.has(resource):
        return default
    q = Entry(e.data[resource], f"{e.where}: {resource}", QUOTA_FIELDS)
    scale = {"gpu": 1.0, "cpu": 1000.0, "memory": 1.0}[resource]

    def amount(key: str, fallback: float) -> float:
        if not q.has(key):
            return fallback
        raw = q.data[key]
        if resource == "gpu":
            value = q.number(key)
        else:
            value = parse_quantity(raw, q.where, key)
        if value == UNLIMITED:
            return UNLIMITED
        if value < 0:
            raise q.fail(key, f"must be a quantity or -1 (unlimited), not {describe(raw)}")
        return value * scale

    weight = q.number("over_quota_weight", default.over_quota_weight, minimum=0)
    return QuotaSpec(amount("deserved", default.deserved), amount("limit", default.limit), weight)
