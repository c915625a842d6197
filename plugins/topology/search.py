"""The domain search of one constrained group: which domains may host its tasks, in KAI's order.

The search starts from the narrowest domain holding the group's node set (never below the preferred
level), packs tightest-fitting domains first, and offers every domain from the preferred level up to
the required level (up to the whole topology without a required level) that can hold the tasks.
"""

from __future__ import annotations

import math

from kai.sdk import ACTIVE_ALLOCATED, MIG_PREFIX, ROOT_GROUP, Resources, TopologyConstraint

from .tree import (
    ROOT_LEVEL,
    UNSET,
    Domain,
    TopologyTree,
    count_allocatable_pods,
    level_domains,
    ratio_to_free,
    sort_for_packing,
    sum_free,
)

#: Node scores of the preferred-level domains go up in steps of this (KAI's topology score scale).
SCORE_STEP = 10000.0


def who(group_name: str) -> str:
    return "workload" if group_name == ROOT_GROUP else f"sub-group {group_name}"


def relevant_levels(group_name: str, c: TopologyConstraint, tree: TopologyTree) -> tuple[list[str], str | None]:
    """The levels whose domains are candidates, narrowest first, or a message saying why the constraint is wrong."""
    required, preferred = c.required_level or "", c.preferred_level or ""
    prefix = f"topology constraint error: {who(group_name)}"
    if not required and not preferred:
        return [], f"{prefix} names topology '{tree.name}' but neither a required nor a preferred level"
    levels = [*reversed(tree.topology.levels), ROOT_LEVEL]
    for kind, level in (("required", required), ("preferred", preferred)):
        if level and level not in levels:
            return [], (f"{prefix} specified '{level}' as the {kind} topology constraint level, but the "
                        f"topology tree '{tree.name}' does not contain a level with this name")
    start = levels.index(preferred or required)
    end = levels.index(required) if required else len(levels) - 1
    if start > end:
        return [], (f"{prefix} specified '{preferred}' as the preferred topology constraint level, but it is "
                    f"wider than the required level '{required}'")
    return levels[start:end + 1], None


def misfit_detail(domain: Domain, group_name: str, detail: list[str]) -> str:
    """KAI's detailed form of a domain's misfit: ``<domain>: [subgroup S: ]details``."""
    sub = f"subgroup {group_name}: " if group_name and group_name != "default" else ""
    return f"<{domain.id}>: {sub}{', '.join(detail)}"


def no_match(job, group_name: str, tree: TopologyTree, c: TopologyConstraint, why: str = "") -> str:
    """KAI's message when no domain of the topology can host the group."""
    what = f"job <{job.namespace}/{job.name}>"
    if group_name and group_name != "default":
        what += f", subgroup {group_name}"
    return (f"topology {tree.name}, requirement {c.required_level or ''} couldn't be satisfied for {what}"
            f"{': ' + why if why else ''}")


class Search:
    """The candidate domains of one group's tasks on one node set."""

    def __init__(self, tree: TopologyTree, tasks, nodes):
        self.tree = tree
        self.count = len(tasks)
        self.total = Resources()
        self.total_gpus = 0.0
        for t in tasks:
            self.total.add(t.request.node_resources())
            self.total_gpus += t.request.gpus_required
        self.inside = {n.name for n in nodes if tree.contains(n)}
        self.tasks, self.nodes = tasks, nodes

    def start(self, preferred_level: str | None) -> Domain:
        """The search root with its subtree's free amounts (and pods it holds, for alike tasks) filled in."""
        root = self.tree.lowest_common_domain(self.nodes, preferred_level)
        self.tree.reset()
        sum_free(root)
        if alike(self.tasks):
            largest = Resources()
            for t in self.tasks:
                r = t.request.node_resources()
                largest.cpu, largest.memory = max(largest.cpu, r.cpu), max(largest.memory, r.memory)
                largest.gpu = max(largest.gpu, r.gpu)
                for k, v in r.scalars.items():
                    largest.scalars[k] = max(largest.scalars.get(k, 0.0), v)
            shared = [t for t in self.tasks if t.request.is_shared_gpu]
            shared_task = None
            if shared:
                shared_task = max(shared, key=lambda t: (t.request.gpu_fraction, t.request.gpu_memory_mib))
            count_allocatable_pods(root, largest, shared_task, self.count)
        return root

    def misfit(self, domain: Domain) -> tuple[list[str], list[str]]:
        """Why the tasks do not fit ``domain``: KAI's short and detailed messages, both empty when they do."""
        if domain.allocatable_pods != UNSET:
            if domain.allocatable_pods < self.count:
                why = [f"node-group {domain.id} can allocate only {domain.allocatable_pods} of {self.count} "
                       "required pods"]
                return why, why
            return [], []
        if ratio_to_free(self.total, self.total_gpus, domain.free) <= 1.0:
            return [], []
        free, total, short, detail = domain.free, self.total, [], []

        def lacks(kind: str, name: str, want: str, have: str) -> None:
            short.append(f"node-group(s) didn't have enough {kind}: {name}")
            verb = "resources" if kind == "resources" and name in ("CPU cores", "memory") else "resource"
            detail.append(f"{domain.id} didn't have enough {verb}: {name}, requested: {want}, available: {have}")

        migs = {k: v for k, v in total.scalars.items() if k.startswith(MIG_PREFIX)}
        for k, v in migs.items():
            if free.scalars.get(k, 0.0) < v:
                lacks("of mig profile", k, f"{v:.0f}", f"{free.scalars.get(k, 0.0):.0f}")
        if not migs and self.total_gpus > free.gpu:
            lacks("resources", "GPUs", f"{self.total_gpus:.3g}", f"{free.gpu:.3g}")
        if math.floor(total.cpu) > math.floor(free.cpu):
            lacks("resources", "CPU cores", _digits(total.cpu / 1000), _digits(free.cpu / 1000))
        if total.memory > free.memory:
            lacks("resources", "memory", _digits(total.memory / 1e9), _digits(free.memory / 1e9))
        for k, v in total.scalars.items():
            if free.scalars.get(k, 0.0) < v:
                lacks("resources", k, f"{v:.0f}", f"{free.scalars.get(k, 0.0):.0f}")
        return short, detail

    def pack(self, root: Domain, deepest_level: str) -> None:
        sort_for_packing(root, self.total, self.total_gpus, deepest_level)

    def candidates(self, levels: list[str], domains_by_level) -> tuple[list[Domain], list]:
        """Domains of ``levels`` that hold the tasks, in bottom-up tree order; and for each domain of the
        widest level that does not, (domain, short messages, detailed messages)."""
        found, widest_misfits = [], []
        for k, level in enumerate(levels):
            for domain in domains_by_level.get(level, {}).values():
                short, detail = self.misfit(domain)
                if not short:
                    found.append(domain)
                elif k == len(levels) - 1:
                    widest_misfits.append((domain, short, detail))
        position = {id(d): k for k, d in enumerate(self.tree.reverse_level_order())}
        found.sort(key=lambda d: position[id(d)])
        return found, widest_misfits

    def node_set(self, domain: Domain) -> list:
        return [n for n in domain.nodes if n.name in self.inside]


def _digits(x: float) -> str:
    """A number with up to three decimals, trailing zeros dropped (KAI's humanized amounts)."""
    return f"{x:.3f}".rstrip("0").rstrip(".")


def alike(tasks) -> bool:
    """All tasks ask for GPUs or none does, and every extended resource is asked by all (KAI's test for
    counting a domain's capacity in pods)."""
    with_gpus = sum(1 for t in tasks if t.request.gpus or t.request.is_shared_gpu)
    if with_gpus not in (0, len(tasks)):
        return False
    seen: dict[str, int] = {}
    for t in tasks:
        for k in t.request.node_resources().scalars:
            seen[k] = seen.get(k, 0) + 1
    return all(n == len(tasks) for n in seen.values())


def domains_with_active_tasks(tree: TopologyTree, job, pod_sets, required_level: str) -> dict[str, dict]:
    """The subtrees of the required-level domains already running a task of ``pod_sets``, by level."""
    names = set(pod_sets)
    nodes = {t.node for t in job.tasks.values() if t.pod_set in names and t.status in ACTIVE_ALLOCATED}
    out: dict[str, dict] = {}
    for domain in tree.by_level.get(required_level, {}).values():
        if nodes & domain.node_names:
            for d in domain.walk():
                out.setdefault(d.level, {})[d.id] = d
    return out


def has_active_tasks(job, pod_sets) -> bool:
    names = set(pod_sets)
    return any(t.pod_set in names and t.status in ACTIVE_ALLOCATED for t in job.tasks.values())


def preferred_scores(root: Domain, preferred_level: str) -> dict[str, float]:
    """Node scores for a preferred level: the roomier the domain in packing order, the higher (steps of 10000)."""
    domains = level_domains(root, preferred_level)
    scores = {}
    for i, domain in enumerate(domains):
        score = math.floor((i + 1) / len(domains) * 10) * SCORE_STEP
        for node in domain.nodes:
            scores[node.name] = score
    return scores
