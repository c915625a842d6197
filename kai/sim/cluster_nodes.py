"""The nodes of the simulator's cluster file, with their NUMA zones, taints, MIG devices and DRA devices, and
its device classes and topologies (``docs/simulate.md``)."""

from __future__ import annotations

import re
from typing import Any

import attrs

from kai.api import GPU, Node, NumaTopology, NumaZone, Resources, Taint, Topology
from kai.api.dra import Device, DeviceClass, ResourceSlice
from kai.api.numa import POLICIES, SCOPE_CONTAINER, SCOPES
from kai.common.errors import ConfigError
from kai.common.yamlfile import describe
from kai.sim.cluster_fields import (
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS,
    MAX_NODES,
    MAX_PODS_PER_NODE,
    Entry,
    mig_counts,
    named,
    parse_quantity,
)
from kai.sim.numa_facts import MAX_ZONES

NODE_FIELDS = (
    "name", "count", "gpus", "cpu", "memory", "gpu_memory", "max_pods", "labels", "taints", "mig_strategy", "mig",
    "numa", "devices",
)
NUMA_FIELDS = ("policy", "scope", "zones")
ZONE_FIELDS = ("name", "cpu", "memory", "gpus", "available")
ZONE_AMOUNT_FIELDS = ("cpu", "memory", "gpus")
MIG_STRATEGIES = ("single", "mixed")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOPOLOGY_FIELDS = ("name", "levels", "aliases")
#: Dynamic Resource Allocation: device classes and a node's devices (one node-local slice per entry).
DEVICE_CLASS_FIELDS = ("name", "selectors", "extended_resource_name")
DEVICES_FIELDS = ("driver", "count", "attributes", "capacity")


def parse_nodes(file: str, items: Any, slices: list[ResourceSlice]) -> list[Node]:
    """The nodes of the file; their ``devices`` are added to ``slices``."""
    nodes: list[Node] = []
    for where, item in named(items, file, "nodes"):
        e = Entry(item, where, NODE_FIELDS)
        name, gpus = e.get("name", str), e.count("gpus", 0, maximum=MAX_GPUS)
        # GPU memory per device: a quantity string, or a bare number of MiB (KAI's unit for it).
        gpu_mib = e.quantity("gpu_memory", 0.0) / (2**20 if isinstance(e.data.get("gpu_memory"), str) else 1)
        if gpu_mib > MAX_GPU_MEMORY_MIB:
            raise e.fail("gpu_memory", f"must be at most {MAX_GPU_MEMORY_MIB} MiB, "
                         f"not {describe(e.data['gpu_memory'])}")
        gpu_mib = int(gpu_mib)
        strategy = e.text("mig_strategy", None, MIG_STRATEGIES)
        mig = mig_counts(e, "mig")
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


def _numa(e: Entry) -> NumaTopology | None:
    """A node's NUMA zones: ``{policy, scope, zones: [{name, cpu, memory, gpus, available: {cpu, memory, gpus}}]}``."""
    if not e.has("numa"):
        return None
    t = Entry(e.mapping("numa"), f"{e.where}: numa", NUMA_FIELDS)
    zones: list[NumaZone] = []
    for where, item in named(t.get("zones", list), t.where, "zones"):
        z = Entry(item, where, ZONE_FIELDS)
        allocatable = _zone_amounts(z)
        available = _zone_amounts(Entry(z.mapping("available"), f"{where}: available", ZONE_AMOUNT_FIELDS))
        zone = NumaZone(z.get("name", str), allocatable, {**allocatable, **available})
        if any(other.id == zone.id for other in zones):
            raise z.fail("name", f"{describe(zone.id)} is listed twice")
        zones.append(zone)
    if not 0 < len(zones) <= MAX_ZONES:
        raise t.fail("zones", f"must list the node's NUMA zones (1 to {MAX_ZONES})")
    return NumaTopology(t.text("policy", choices=POLICIES), t.text("scope", SCOPE_CONTAINER, SCOPES), tuple(zones))


def _zone_amounts(e: Entry) -> dict[str, float]:
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
        e = Entry(value, where, ("key", "value", "effect"))
        key, effect = e.get("key", str), e.get("effect", str, "NoSchedule")
        val = str(e.get("value", (str, int, float), ""))
    if effect not in TAINT_EFFECTS:
        raise ConfigError(f"{where}: field 'effect' must be one of {', '.join(TAINT_EFFECTS)}, not {describe(effect)}")
    return Taint(key, val, effect)


def node_slices(node: str, entries: list, where: str) -> list[ResourceSlice]:
    """The node-local ResourceSlices of a node's ``devices`` entries: one per driver, its pool the node's name."""
    devices = [_devices(d, f"{where}[{k}]") for k, d in enumerate(entries)]
    return [ResourceSlice(f"{node}-{driver}", driver, node, tuple(group), node=node)
            for driver, group in _by_driver(devices)]


def _devices(value: Any, where: str) -> tuple[str, list[Device]]:
    """One entry of a node's ``devices``: ``count`` devices of ``driver``, each with the same attributes and
    capacities, named ``<driver's first label>-<i>``."""
    e = Entry(value, where, DEVICES_FIELDS)
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
    for where, item in named(items, file, "device_classes"):
        e = Entry(item, where, DEVICE_CLASS_FIELDS)
        classes.append(DeviceClass(e.get("name", str), tuple(e.names("selectors")),
                                   e.get("extended_resource_name", str, "")))
    return classes


def parse_topologies(file: str, items: Any) -> list[Topology]:
    topologies = []
    for where, item in named(items, file, "topologies"):
        e = Entry(item, where, TOPOLOGY_FIELDS)
        e.sequence("levels")
        topology = Topology(e.get("name", str), tuple(e.names("levels")), e.labels("aliases"))
        why = topology.problem()
        if why:
            raise ConfigError(f"{where}: {why}")
        topologies.append(topology)
    return topologies
