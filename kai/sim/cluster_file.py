"""Load the simulator's cluster file: nodes, queues and workloads in a platform engineer's terms.

The format is documented in ``docs/simulate.md``. Quantities are Kubernetes quantities ("500m",
"64", "512Gi"); priorities are numbers or KAI's priority class names. Every error names the file,
the entry and the field, and unknown fields are errors (a typo must not be silently ignored).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from kai.api import (
    ACTIVE_USED,
    GPU,
    MIG_PREFIX,
    UNLIMITED,
    GpuRequestError,
    Job,
    Node,
    NumaTopology,
    NumaZone,
    PodSet,
    Queue,
    QuotaSpec,
    ResourceRequest,
    Resources,
    SubGroup,
    Taint,
    Task,
    TaskStatus,
    Toleration,
    Topology,
    TopologyConstraint,
    mig_gpu_slices,
    parse_gpu_sharing,
)
from kai.api.dra import (
    ALL,
    EXACT_COUNT,
    Device,
    DeviceClass,
    DeviceRequest,
    DynamicResources,
    PodResourceClaim,
    ResourceClaim,
    ResourceSlice,
)
from kai.api.names import QUEUE_LABEL
from kai.api.numa import POLICIES, QOS_CLASSES, SCOPE_CONTAINER, SCOPES
from kai.common.durations import parse_duration
from kai.common.errors import ConfigError
from kai.common.quantity import QuantityError, parse
from kai.common.yamlfile import MAX_NUMBER, Fields, check_number, describe
from kai.framework import DEFAULT_CONFIG, SchedulerConfig, Snapshot, build_snapshot, parse_config
from kai.sim.numa_facts import MAX_ZONES

#: KAI's priority classes and their values.
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
#: Jobs with a priority below this are preemptible unless the workload says otherwise (KAI's rule).
PREEMPTIBLE_BELOW = 100

TOP_FIELDS = ("name", "cycles", "config", "topologies", "device_classes", "nodes", "queues", "workloads")
TOPOLOGY_FIELDS = ("name", "levels", "aliases")
NODE_FIELDS = (
    "name", "count", "gpus", "cpu", "memory", "gpu_memory", "max_pods", "labels", "taints", "mig_strategy", "mig",
    "numa", "devices",
)
NUMA_FIELDS = ("policy", "scope", "zones")
ZONE_FIELDS = ("name", "cpu", "memory", "gpus", "available")
ZONE_AMOUNT_FIELDS = ("cpu", "memory", "gpus")
QUEUE_FIELDS = ("name", "parent", "priority", "gpu", "cpu", "memory", "preempt_min_runtime", "reclaim_min_runtime")
QUOTA_FIELDS = ("deserved", "limit", "over_quota_weight")
WORKLOAD_FIELDS = (
    "name", "queue", "priority", "preemptible", "replicas", "min_available", "gpus", "cpu", "memory",
    "node_selector", "tolerations", "running_on", "topology", "subgroups", "pod_sets", "annotations", "mig",
    "qos_class", "claims",
)
#: Dynamic Resource Allocation: device classes, a node's devices (one node-local slice per entry), claims.
DEVICE_CLASS_FIELDS = ("name", "selectors", "extended_resource_name")
DEVICES_FIELDS = ("driver", "count", "attributes", "capacity")
CLAIM_FIELDS = ("name", "device_class", "count", "all", "selectors", "admin_access", "shared")
MIG_STRATEGIES = ("single", "mixed")
#: Fields of a workload that belong to each pod set when the workload lists ``pod_sets``.
POD_SET_ONLY = ("replicas", "min_available", "running_on")
POD_SET_FIELDS = ("name", "parent", "gpus", "cpu", "memory", "topology") + POD_SET_ONLY
SUBGROUP_FIELDS = ("name", "parent", "topology")
CONSTRAINT_FIELDS = ("topology", "required_level", "preferred_level")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: Most nodes and pods a file may describe, and the largest counts of one entry (docs/simulate.md, "Bad input").
MAX_NODES = 10_000
MAX_PODS = 100_000
MAX_GPUS = 1024
MAX_CYCLES = 1000
MAX_PODS_PER_NODE = 10_000
MAX_GPU_MEMORY_MIB = 2**31 - 1
MAX_PRIORITY = 2**31 - 1


def parse_quantity(value: Any, where: str, field: str) -> float:
    """A Kubernetes quantity (a number or a string such as ``500m`` or ``16Gi``) in base units, at most
    :data:`~kai.common.yamlfile.MAX_NUMBER` in size."""

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{where}: field '{field}' {message}")

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return check_number(value, -MAX_NUMBER, MAX_NUMBER, fail)
    try:
        number = float(parse(value)) if isinstance(value, str) else None
    except QuantityError:
        number = None
    if number is None:
        raise ConfigError(f"{where}: field '{field}': {describe(value)} is not a Kubernetes quantity "
                          "(like 500m, 4, 16Gi)")
    if not abs(number) <= MAX_NUMBER:  # also catches inf and nan
        raise fail(f"must be at most {MAX_NUMBER:g} in size, not {describe(value)}")
    return number


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

    def snapshot(self, now: float) -> Snapshot:
        return build_snapshot(self.nodes, self.queues, self.jobs, now, self.topologies, dra=self._dra())

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


class _Entry(Fields):
    """Typed access to one entry of a cluster file; unknown fields are errors."""

    def count(self, key: str, default: int, minimum: int = 0, maximum: int = MAX_PODS) -> int:
        return self.whole(key, default, minimum, maximum)

    def quantity(self, key: str, default: Any = attrs.NOTHING) -> float:
        if not self.has(key):
            if default is attrs.NOTHING:
                raise self.fail(key, "is missing")
            return default
        value = parse_quantity(self.data[key], self.where, key)
        if value < 0:
            raise self.fail(key, f"must not be negative, not {describe(self.data[key])}")
        return value


def _named(items: Any, file: str, section: str) -> list[tuple[str, Any]]:
    """(where, item) of each entry of a list section, ``where`` naming the entry by index and name."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError(f"{file}: field '{section}' must be a list, not {describe(items)}")
    out = []
    for i, item in enumerate(items):
        where = f"{file}: {section}[{i}]"
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(item, dict) and not isinstance(name, str):
            raise ConfigError(f"{where}: field 'name' is missing or not a string")
        out.append((f"{where} {describe(name)}" if name else where, item))
    return out


def _nodes(file: str, items: Any, slices: list[ResourceSlice]) -> list[Node]:
    """The nodes of the file; their ``devices`` are added to ``slices``."""
    nodes: list[Node] = []
    for where, item in _named(items, file, "nodes"):
        e = _Entry(item, where, NODE_FIELDS)
        name, gpus = e.get("name", str), e.count("gpus", 0, maximum=MAX_GPUS)
        # GPU memory per device: a quantity string, or a bare number of MiB (KAI's unit for it).
        gpu_mib = e.quantity("gpu_memory", 0.0) / (2**20 if isinstance(e.data.get("gpu_memory"), str) else 1)
        if gpu_mib > MAX_GPU_MEMORY_MIB:
            raise e.fail("gpu_memory", f"must be at most {MAX_GPU_MEMORY_MIB} MiB, "
                         f"not {describe(e.data['gpu_memory'])}")
        gpu_mib = int(gpu_mib)
        strategy = e.text("mig_strategy", None, MIG_STRATEGIES)
        mig = _mig_counts(e, "mig")
        # A mixed-strategy node offers its GPUs only as MIG devices.
        allocatable = Resources(e.quantity("cpu") * 1000, e.quantity("memory"),
                                0.0 if strategy == "mixed" else float(gpus), {k: float(v) for k, v in mig.items()})
        taints = tuple(_taint(t, f"{where}: taints[{k}]") for k, t in enumerate(e.get("taints", list, [])))
        count = e.count("count", 1, minimum=1, maximum=MAX_NODES) if e.has("count") else None
        if len(nodes) + (count or 1) > MAX_NODES:
            raise ConfigError(f"{where}: the file describes more than {MAX_NODES:,} nodes, the most it may")
        names = [name] if count is None else [f"{name}-{k}" for k in range(count)]
        labels_given = e.labels("labels")
        numa = _numa(e)
        devices = e.get("devices", list, [])
        max_pods = e.count("max_pods", 110, minimum=1, maximum=MAX_PODS_PER_NODE)
        for n in names:
            labels = {"kubernetes.io/hostname": n, "nvidia.com/gpu.count": str(gpus)}
            if gpu_mib:
                labels["nvidia.com/gpu.memory"] = str(gpu_mib)
            if strategy:
                labels.update({"node-role.kubernetes.io/mig-enabled": "true", "nvidia.com/mig.strategy": strategy})
            labels.update(labels_given)
            nodes.append(Node(n, allocatable.copy(), labels, taints, max_pods=max_pods, gpu_memory_mib=gpu_mib,
                              numa=numa))
            slices.extend(node_slices(n, devices, f"{where}: devices"))
    return nodes


def node_slices(node: str, entries: list, where: str) -> list[ResourceSlice]:
    """The node-local ResourceSlices of a node's ``devices`` entries: one per driver, its pool the node's name."""
    devices = [_devices(d, f"{where}[{k}]") for k, d in enumerate(entries)]
    return [ResourceSlice(f"{node}-{driver}", driver, node, tuple(group), node=node)
            for driver, group in _by_driver(devices)]


def _devices(value: Any, where: str) -> tuple[str, list[Device]]:
    """One entry of a node's ``devices``: ``count`` devices of ``driver``, each with the same attributes and
    capacities, named ``<driver's first label>-<i>``."""
    e = _Entry(value, where, DEVICES_FIELDS)
    driver = e.get("driver", str)
    attributes = {}
    for name, item in e.mapping("attributes").items():
        if isinstance(item, float) or not isinstance(item, (str, int, bool)):
            raise e.fail("attributes", f"{describe(name)} must be a string, whole number or boolean, "
                                       f"not {describe(item)}")
        attributes[str(name)] = item
    capacity = {str(name): parse_quantity(item, where, f"capacity.{name}") for name, item in
                e.mapping("capacity").items()}
    stem = driver.split(".")[0]
    return driver, [Device(f"{stem}-{i}", dict(attributes), dict(capacity))
                    for i in range(e.count("count", 1, minimum=1, maximum=MAX_GPUS))]


def _by_driver(entries: list[tuple[str, list[Device]]]) -> list[tuple[str, list[Device]]]:
    """The devices of a node by driver (one slice each), numbered on across entries of the same driver."""
    out: dict[str, list[Device]] = {}
    for driver, devices in entries:
        have = out.setdefault(driver, [])
        stem, start = driver.split(".")[0], len(have)
        have.extend(attrs.evolve(d, name=f"{stem}-{start + i}") for i, d in enumerate(devices))
    return list(out.items())


def device_classes(file: str, items: Any) -> list[DeviceClass]:
    """The DeviceClasses of a ``device_classes`` list, each ``{name, selectors, extended_resource_name}``."""
    classes = []
    for where, item in _named(items, file, "device_classes"):
        e = _Entry(item, where, DEVICE_CLASS_FIELDS)
        classes.append(DeviceClass(e.get("name", str), tuple(e.names("selectors")),
                                   e.get("extended_resource_name", str, "")))
    return classes


def _claim_requests(e: _Entry, classes: set[str]) -> list[tuple[str, bool, DeviceRequest]]:
    """(claim name, shared, its one request) of each entry of a workload's ``claims``."""
    out = []
    for where, item in _named(e.get("claims", list, []), e.where, "claims"):
        c, request = claim_request(item, where, classes, CLAIM_FIELDS)
        out.append((c.get("name", str), c.get("shared", bool, False), request))
    return out


def claim_request(item: Any, where: str, classes: set[str], fields: tuple[str, ...],
                  max_count: int = MAX_GPUS) -> tuple[_Entry, DeviceRequest]:
    """A claim entry (fields ``fields``, among them ``{device_class, count, all, selectors, admin_access}``) and
    its one request: ``count`` devices of the class (at most ``max_count``), or ``all`` the matching ones."""
    c = _Entry(item, where, fields)
    device_class = c.get("device_class", str)
    if device_class not in classes:
        raise c.fail("device_class", f"names unknown device class {describe(device_class)}")
    every = c.get("all", bool, False)
    if every and c.has("count"):
        raise ConfigError(f"{where}: fields 'all' and 'count' exclude each other")
    request = DeviceRequest("devices", device_class, tuple(c.names("selectors")), ALL if every else EXACT_COUNT,
                            0 if every else c.count("count", 1, minimum=1, maximum=max_count),
                            c.get("admin_access", bool, False))
    return c, request


def _numa(e: _Entry) -> NumaTopology | None:
    """A node's NUMA zones: ``{policy, scope, zones: [{name, cpu, memory, gpus, available: {cpu, memory, gpus}}]}``."""
    if not e.has("numa"):
        return None
    t = _Entry(e.mapping("numa"), f"{e.where}: numa", NUMA_FIELDS)
    zones: list[NumaZone] = []
    for where, item in _named(t.get("zones", list), t.where, "zones"):
        z = _Entry(item, where, ZONE_FIELDS)
        allocatable = _zone_amounts(z)
        available = _zone_amounts(_Entry(z.mapping("available"), f"{where}: available", ZONE_AMOUNT_FIELDS))
        zone = NumaZone(z.get("name", str), allocatable, {**allocatable, **available})
        if any(other.id == zone.id for other in zones):
            raise z.fail("name", f"{describe(zone.id)} is listed twice")
        zones.append(zone)
    if not 0 < len(zones) <= MAX_ZONES:
        raise t.fail("zones", f"must list the node's NUMA zones (1 to {MAX_ZONES})")
    return NumaTopology(t.text("policy", choices=POLICIES), t.text("scope", SCOPE_CONTAINER, SCOPES), tuple(zones))


def _zone_amounts(e: _Entry) -> dict[str, float]:
    amounts = {"cpu": e.quantity("cpu", None), "memory": e.quantity("memory", None), GPU: e.quantity("gpus", None)}
    if amounts["cpu"] is not None:
        amounts["cpu"] *= 1000
    return {k: v for k, v in amounts.items() if v is not None}


def _taint(value: Any, where: str) -> Taint:
    if isinstance(value, str):
        m = re.fullmatch(r"([^=:]+)(?:=([^:]*))?:(\w+)", value)
        if m is None:
            raise ConfigError(f"{where}: {describe(value)} is not a taint; write key=value:Effect")
        key, val, effect = m.group(1), m.group(2) or "", m.group(3)
    else:
        e = _Entry(value, where, ("key", "value", "effect"))
        key, effect = e.get("key", str), e.get("effect", str, "NoSchedule")
        val = str(e.get("value", (str, int, float), ""))
    if effect not in TAINT_EFFECTS:
        raise ConfigError(f"{where}: field 'effect' must be one of {', '.join(TAINT_EFFECTS)}, not {describe(effect)}")
    return Taint(key, val, effect)


def _toleration(value: Any, where: str) -> Toleration:
    e = _Entry(value, where, ("key", "operator", "value", "effect"))
    op = e.text("operator", "Equal", ("Equal", "Exists"))
    return Toleration(e.get("key", str, ""), op, str(e.get("value", (str, int, float), "")), e.get("effect", str, ""))


def parse_queues(file: str, items: Any) -> list[Queue]:
    """The queues of a cluster file's ``queues`` list (also the queue file of a timed trace replay)."""
    queues = []
    for i, (where, item) in enumerate(_named(items, file, "queues")):
        e = _Entry(item, where, QUEUE_FIELDS)
        defaults = Queue("defaults")
        quotas: dict[str, Any] = {res: _quota(e, res, getattr(defaults, res)) for res in ("gpu", "cpu", "memory")}
        queues.append(Queue(e.get("name", str), e.get("parent", str, None),
                            e.whole("priority", 100, -MAX_PRIORITY, MAX_PRIORITY),
                            creation=float(i), preempt_min_runtime=_runtime(e, "preempt_min_runtime"),
                            reclaim_min_runtime=_runtime(e, "reclaim_min_runtime"), **quotas))
    return queues


def _runtime(e: _Entry, key: str) -> float | None:
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


def _quota(e: _Entry, resource: str, default: QuotaSpec) -> QuotaSpec:
    if not e.has(resource):
        return default
    q = _Entry(e.data[resource], f"{e.where}: {resource}", QUOTA_FIELDS)
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


def _priority(e: _Entry) -> int:
    value = e.get("priority", (int, str), PRIORITY_CLASSES["train"], "a number or a priority class name")
    if isinstance(value, str):
        if value not in PRIORITY_CLASSES:
            names = ", ".join(f"{k} ({v})" for k, v in PRIORITY_CLASSES.items())
            raise ConfigError(f"{e.where}: field 'priority': unknown priority class {describe(value)}; "
                              f"KAI's are {names}")
        return PRIORITY_CLASSES[value]
    return e.whole("priority", value, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)


def _jobs(file: str, items: Any, node_names: set[str], now: float, classes: set[str],
          claims: list[ResourceClaim]) -> list[Job]:
    """The jobs of the file's workloads; the claims of their pods are added to ``claims``."""
    entries = _named(items, file, "workloads")
    jobs = []
    pods = 0  # described by the workloads before this one
    for i, (where, item) in enumerate(entries):
        e = _Entry(item, where, WORKLOAD_FIELDS)
        name, priority = e.get("name", str), _priority(e)
        # Earlier workloads were submitted earlier: one second apart, in file order.
        job = Job(name, e.get("queue", str), priority, creation=now - float(len(entries) - i),
                  topology=_constraint(e))
        job.pod_sets.clear()
        job.preemptible = e.get("preemptible", bool, priority < PREEMPTIBLE_BELOW)
        if e.has("pod_sets"):
            for key in POD_SET_ONLY:
                if e.has(key):
                    raise ConfigError(f"{where}: field '{key}' belongs in each of 'pod_sets'")
            job.subgroups = _subgroups(e)
            for ps_where, ps in _named(e.data["pod_sets"], where, "pod_sets"):
                ps_e = _Entry(ps, ps_where, POD_SET_FIELDS)
                ps_name = ps_e.get("name", str)
                if ps_name in job.pod_sets or ps_name in job.subgroups:
                    raise ConfigError(f"{ps_where}: name {describe(ps_name)} is used twice in the workload")
                parent = ps_e.get("parent", str, None)
                if parent is not None and parent not in job.subgroups:
                    raise ConfigError(f"{ps_where}: field 'parent' names unknown subgroup {describe(parent)}")
                _add_pod_set(job, ps_e, ps_name, parent, e, f"{name}-{ps_name}", node_names, now,
                             pods + len(job.tasks))
        else:
            if e.has("subgroups"):
                raise ConfigError(f"{where}: field 'subgroups' needs 'pod_sets' (the pods of the subgroups)")
            _add_pod_set(job, e, "default", None, None, name, node_names, now, pods)
        requests = _claim_requests(e, classes)
        if requests:
            _claim_pods(job, requests, claims, e)
        jobs.append(job)
        pods += len(job.tasks)
    return jobs


def _claim_pods(job: Job, requests: list[tuple[str, bool, DeviceRequest]], claims: list[ResourceClaim],
                e: _Entry) -> None:
    """Give every pod of ``job`` its claims: one per pod (``<pod>-<claim>``), or one for all (``shared``)."""
    shared = {name: ResourceClaim("default", f"{job.name}-{name}", (request,), labels={QUEUE_LABEL: job.queue})
              for name, is_shared, request in requests if is_shared}
    claims.extend(shared.values())
    for task in job.tasks.values():
        if task.node is not None:
            raise ConfigError(f"{e.where}: pods with 'claims' cannot be 'running_on' a node (their devices are "
                              "not known); let them be placed in a first cycle")
        own = []
        for name, is_shared, request in requests:
            if is_shared:
                claim = shared[name]
            else:  # as if generated from a template for the pod
                claim = ResourceClaim("default", f"{task.name}-{name}", (request,), from_template=True)
                claims.append(claim)
            own.append((PodResourceClaim(name, claim.name, "" if is_shared else name), claim))
        task.resource_claims = tuple(entry for entry, _ in own)
        task.request = attrs.evolve(task.request, dra_gpus=sum(claim.gpus for _, claim in own))


def _add_pod_set(job: Job, e: _Entry, ps_name: str, parent: str | None, workload: _Entry | None, prefix: str,
                 node_names: set[str], now: float, pods: int) -> None:
    """Add one pod set of ``e`` (the workload itself, or one of its ``pod_sets``) and its pods to ``job``;
    requests not given in a pod set default to the workload's. ``pods``: pods the file described before."""
    outer = workload or e
    replicas = e.count("replicas", 1, minimum=1)
    if pods + replicas > MAX_PODS:
        raise ConfigError(f"{e.where}: the file describes more than {MAX_PODS:,} pods, the most it may")
    min_available = e.count("min_available", replicas, minimum=1)
    if min_available > replicas:
        raise ConfigError(f"{e.where}: field 'min_available' ({min_available}) exceeds 'replicas' ({replicas})")
    job.pod_sets[ps_name] = PodSet(ps_name, min_available, parent, _constraint(e) if workload else None)

    def amount(key: str) -> float:
        return e.quantity(key, outer.quantity(key, 0.0) if workload else 0.0)

    gpus = e.count("gpus", outer.count("gpus", 0, maximum=MAX_GPUS) if workload else 0, maximum=MAX_GPUS)
    request, invalid = _request(outer, gpus, amount("cpu") * 1000, amount("memory"))
    tolerations = tuple(_toleration(t, f"{outer.where}: tolerations[{k}]")
                        for k, t in enumerate(outer.get("tolerations", list, [])))
    placed = _running_on(e, replicas, node_names)
    qos_class = outer.text("qos_class", "", QOS_CLASSES)
    for k in range(replicas):
        node = placed[k] if k < len(placed) else None
        job.add_task(Task(f"{prefix}-{k}", job.uid, request, TaskStatus.RUNNING if node else TaskStatus.PENDING,
                          node, creation=job.creation, labels={"job-name": job.name}, pod_set=ps_name,
                          node_selector=outer.labels("node_selector"), tolerations=tolerations, invalid=invalid,
                          qos_class=qos_class))
    if placed:
        job.last_start = now - 60.0


def _mig_counts(e: _Entry, key: str) -> dict[str, int]:
    counts = {}
    for profile, count in e.mapping(key).items():
        try:
            mig_gpu_slices(str(profile))
        except ValueError:
            raise ConfigError(f"{e.where}: field '{key}': {describe(profile)} is not a MIG profile like "
                              f"{MIG_PREFIX}1g.10gb") from None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GPUS:
            raise ConfigError(f"{e.where}: field '{key}': the count of {profile} must be a whole number from 0 to "
                              f"{MAX_GPUS}, not {describe(count)}")
        counts[str(profile)] = count
    return counts


def _request(e: _Entry, gpus: int, cpu: float, memory: float) -> tuple[ResourceRequest, str | None]:
    """A pod's request, and why it can never be scheduled when the workload's GPU-sharing annotations are
    malformed (not a file error: the pods stay pending with the reason, as in a cluster)."""
    base: dict[str, Any] = {"cpu": cpu, "memory": memory, "gpus": gpus, "mig": _mig_counts(e, "mig")}
    try:
        fraction, devices, mib = parse_gpu_sharing(e.labels("annotations"), gpu_limit=gpus)
    except GpuRequestError as exc:
        return ResourceRequest(**base), f"invalid GPU request: {exc}"
    return ResourceRequest(gpu_fraction=fraction, gpu_devices=devices, gpu_memory_mib=mib, **base), None


def _subgroups(e: _Entry) -> dict[str, SubGroup]:
    """The inner groups of a workload's tree; parents must be listed before their children."""
    groups: dict[str, SubGroup] = {}
    for where, item in _named(e.get("subgroups", list, []), e.where, "subgroups"):
        g = _Entry(item, where, SUBGROUP_FIELDS)
        name, parent = g.get("name", str), g.get("parent", str, None)
        if name in groups:
            raise ConfigError(f"{where}: subgroup {describe(name)} is listed twice")
        if parent is not None and parent not in groups:
            raise ConfigError(f"{where}: field 'parent' names {describe(parent)}, which is not a subgroup listed "
                              "before it")
        groups[name] = SubGroup(name, parent, _constraint(g))
    return groups


def _constraint(e: _Entry) -> TopologyConstraint | None:
    """The entry's ``topology`` constraint: ``{topology, required_level, preferred_level}``."""
    if not e.has("topology"):
        return None
    c = _Entry(e.data["topology"], f"{e.where}: topology", CONSTRAINT_FIELDS)
    required, preferred = c.get("required_level", str, None), c.get("preferred_level", str, None)
    if required is None and preferred is None:
        raise ConfigError(f"{c.where}: give 'required_level', 'preferred_level' or both")
    return TopologyConstraint(c.get("topology", str), required, preferred)


def _topologies(file: str, items: Any) -> list[Topology]:
    topologies = []
    for where, item in _named(items, file, "topologies"):
        e = _Entry(item, where, TOPOLOGY_FIELDS)
        e.sequence("levels")
        topology = Topology(e.get("name", str), tuple(e.names("levels")), e.labels("aliases"))
        why = topology.problem()
        if why:
            raise ConfigError(f"{where}: {why}")
        topologies.append(topology)
    return topologies


def _running_on(e: _Entry, replicas: int, node_names: set[str]) -> list[str]:
    value = e.get("running_on", (str, list), [], "a node name or a list of node names (one per running pod)")
    nodes = [value] if isinstance(value, str) else e.names("running_on")
    if len(nodes) > replicas:
        raise ConfigError(f"{e.where}: field 'running_on' lists {len(nodes)} pods but 'replicas' is {replicas}")
    for node in nodes:
        if node not in node_names:
            raise ConfigError(f"{e.where}: field 'running_on' names unknown node {describe(node)}")
    return nodes


def parse_cluster(data: Any, file: str, now: float) -> ClusterFile:
    """Build the facts of a parsed cluster file (a mapping)."""
    top = _Entry(data, file, TOP_FIELDS)
    slices: list[ResourceSlice] = []
    claims: list[ResourceClaim] = []
    nodes = _nodes(file, data.get("nodes"), slices)
    classes = device_classes(file, data.get("device_classes"))
    config = parse_config(data["config"], f"{file}: config") if top.has("config") else DEFAULT_CONFIG
    jobs = _jobs(file, data.get("workloads"), {n.name for n in nodes}, now, {c.name for c in classes}, claims)
    return ClusterFile(
        name=top.get("name", str, file), file=file, nodes=nodes, queues=parse_queues(file, data.get("queues")),
        jobs=jobs, config=config, cycles=top.count("cycles", 1, minimum=1, maximum=MAX_CYCLES),
        topologies=_topologies(file, data.get("topologies")), device_classes=classes, slices=slices, claims=claims,
    )
