"""The domain tree of one Topology over a session's nodes, and the per-job amounts the search needs.

A synthetic ``root`` domain holds every node of the topology; below it one domain per value of each
level (ids join the values of every wider level with dots). Nodes lacking a level label are outside
the topology and in no domain.
"""

from __future__ import annotations

import math
from collections import deque

from kai.sdk import EPSILON, Resources, Topology

ROOT_LEVEL = ROOT_ID = "root"
#: ``allocatable_pods`` of a domain whose tasks are not counted in pods (mixed requests).
UNSET = -1
#: KAI's ratio of a requested resource that a domain does not have at all.
MISSING_RESOURCE_RATIO = 1000.0


class Domain:
    __slots__ = ("id", "level", "children", "nodes", "node_names", "allocatable_pods", "free")

    def __init__(self, domain_id: str, level: str):
        self.id, self.level = domain_id, level
        self.children: list[Domain] = []
        self.nodes: list = []
        self.node_names: set[str] = set()
        self.allocatable_pods = UNSET
        self.free = Resources()

    def add_node(self, node) -> None:
        self.nodes.append(node)
        self.node_names.add(node.name)

    def walk(self):
        """This domain and every domain below it."""
        yield self
        for child in self.children:
            yield from child.walk()

    def __repr__(self) -> str:
        return f"Domain({self.level}={self.id})"


class TopologyTree:
    """The domains of ``topology`` by level, built from the session's nodes (in name order)."""

    def __init__(self, topology: Topology, nodes):
        self.topology = topology
        self.name = topology.name
        self.root = Domain(ROOT_ID, ROOT_LEVEL)
        self.by_level: dict[str, dict[str, Domain]] = {ROOT_LEVEL: {ROOT_ID: self.root}}
        self.by_level.update((level, {}) for level in topology.levels)
        for node in sorted(nodes, key=lambda n: n.sort_key):
            ids = topology.domains(node.labels)
            if ids is None:
                continue
            parent = self.root
            parent.add_node(node)
            for level, domain_id in zip(topology.levels, ids):
                domain = self.by_level[level].get(domain_id)
                if domain is None:
                    domain = self.by_level[level][domain_id] = Domain(domain_id, level)
                    parent.children.append(domain)
                domain.add_node(node)
                parent = domain

    def contains(self, node) -> bool:
        return node.name in self.root.node_names

    def lowest_common_domain(self, nodes, preferred_level: str | None) -> Domain:
        """The narrowest domain holding every node of ``nodes`` that is in the topology, not below the
        preferred level (the search never looks below it)."""
        inside = [n for n in nodes if self.contains(n)]
        domain = self.root
        for level in self.topology.levels:
            values = {n.labels[level] for n in inside}
            if len(values) != 1 or "" in values:
                break
            key = next(iter(values)) if domain is self.root else f"{domain.id}.{next(iter(values))}"
            domain = self.by_level[level][key]
            if level == preferred_level:
                break
        return domain

    def reset(self) -> None:
        for domains in self.by_level.values():
            for domain in domains.values():
                domain.allocatable_pods = UNSET
                domain.free = Resources()

    def reverse_level_order(self) -> list[Domain]:
        """Every domain, the narrowest level first, each level in tree order (bottom-up breadth first)."""
        levels, queue = [], deque([self.root])
        while queue:
            level = [queue.popleft() for _ in range(len(queue))]
            levels.append(level)
            for domain in level:
                queue.extend(domain.children)
        return [d for level in reversed(levels) for d in level]


def sum_free(domain: Domain) -> Resources:
    """Fill ``free`` (idle + releasing) of ``domain`` and its subtree from its nodes."""
    if not domain.children:
        for node in domain.nodes:
            domain.free.add(node.non_allocated)
    else:
        for child in domain.children:
            domain.free.add(sum_free(child))
    return domain.free


def count_allocatable_pods(domain: Domain, largest: Resources, shared_task, n_tasks: int) -> int:
    """Fill ``allocatable_pods`` of the subtree: copies of the largest task each node holds (idle + releasing)."""
    if not domain.children:
        domain.allocatable_pods = sum(node_accommodation(n, largest, shared_task, n_tasks) for n in domain.nodes)
    else:
        domain.allocatable_pods = sum(count_allocatable_pods(c, largest, shared_task, n_tasks)
                                      for c in domain.children)
    return domain.allocatable_pods


def node_accommodation(node, largest: Resources, shared_task, n_tasks: int) -> int:
    """How many copies of ``largest`` fit the node's idle + releasing amounts. With ``shared_task`` (the
    largest shared-GPU task) each copy takes its devices from free whole devices or shared devices it fits
    on; a request of nothing but a pod slot fits as often as there are tasks."""
    if not (largest.cpu > 0 or largest.memory > 0 or largest.gpu > 0 or shared_task is not None
            or any(v > 0 for v in largest.scalars.values())):
        return n_tasks
    a, i = node.arrays, node.index
    free = [(a.idle_cpu[i] + a.rel_cpu[i], largest.cpu), (a.idle_mem[i] + a.rel_mem[i], largest.memory),
            (a.idle_pods[i] + a.rel_pods[i], 1.0)]
    gpus = a.idle_gpu[i] + a.rel_gpu[i]
    if shared_task is not None:
        devices = math.floor(gpus + EPSILON) + len(node.fitting_gpu_groups(shared_task))
        free.append((devices, float(shared_task.request.gpu_devices)))
    else:
        free.append((gpus, largest.gpu))
    idle_s, rel_s = a.idle_scalars[i], a.rel_scalars[i]
    free.extend((idle_s.get(k, 0.0) + rel_s.get(k, 0.0), v) for k, v in largest.scalars.items())
    return min(int((have + EPSILON) // need) for have, need in free if need > 0)


def ratio_to_free(total: Resources, total_gpus: float, free: Resources) -> float:
    """The dominant share of ``free`` the tasks would take (KAI's packing measure; above 1 they cannot fit).

    GPUs compare exactly; CPU, memory and extended resources compare as KAI's resource lists do (whole
    cores, bytes, thousandths of a scalar rounded up).
    """
    if total_gpus <= 0 and total.cpu <= 0 and total.memory <= 0 and all(v <= 0 for v in total.scalars.values()):
        return 0.0
    ratio = 0.0
    if total_gpus > 0:
        ratio = total_gpus / free.gpu if free.gpu > 0 else math.inf
    pairs = [(math.ceil(total.cpu / 1000.0), math.ceil(free.cpu / 1000.0)), (int(total.memory), int(free.memory))]
    pairs.extend((math.ceil(v / 1000.0), math.ceil(free.scalars.get(k, 0.0) / 1000.0))
                 for k, v in total.scalars.items())
    for want, have in pairs:
        if want:
            ratio = max(ratio, want / have if have else MISSING_RESOURCE_RATIO)
    return ratio


def sort_for_packing(domain: Domain, total: Resources, total_gpus: float, deepest_level: str) -> None:
    """Order children (down to ``deepest_level``) tightest fit first -- bin packing -- ties by id."""
    domain.children.sort(key=lambda c: (-ratio_to_free(total, total_gpus, c.free), c.id))
    if domain.level == deepest_level:
        return
    for child in domain.children:
        sort_for_packing(child, total, total_gpus, deepest_level)


def level_domains(domain: Domain, level: str) -> list[Domain]:
    """The domains of ``level`` under ``domain``, in tree order."""
    if domain.level == level:
        return [domain]
    return [d for child in domain.children for d in level_domains(child, level)]
