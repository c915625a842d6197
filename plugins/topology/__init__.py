"""``topology``: place a job, subgroup or pod set inside one domain of a Topology (required level), or
as close together as its preferred level allows.

For every constrained group of an allocation step (``kai_subset_nodes``) the plugin offers the
domains that can hold the group's tasks, tightest fit first, from the preferred level up to the
required level; the kernel tries them in order. With a preferred level the nodes of the roomier
preferred-level domains of the chosen area score higher (``kai_node_scores``, steps of 10000), so
tasks gather where there is space for all of them. A constraint naming a topology or level that
does not exist leaves the group unschedulable with a fit error saying so.
"""

from __future__ import annotations

from kai.sdk import ROOT_GROUP, hookimpl

from .search import (
    Search,
    domains_with_active_tasks,
    has_active_tasks,
    misfit_detail,
    no_match,
    preferred_scores,
    relevant_levels,
)
from .tree import TopologyTree

#: KAI's reason of a domain that cannot hold a group.
WORKLOAD_REASON = "Not enough resources for the workload"


class TopologyPlugin:
    name = "topology"

    def __init__(self):
        self.trees: dict[str, TopologyTree] = {}
        #: Node scores of the groups of the job being placed, by group name (reset for each attempt).
        self.scores: dict[str, dict[str, float]] = {}

    @hookimpl
    def kai_session_open(self, session):
        self.trees = {name: TopologyTree(t, session.nodes) for name, t in session.snapshot.topologies.items()}
        self.scores = {}

    @hookimpl
    def kai_session_close(self):
        self.trees, self.scores = {}, {}

    @hookimpl
    def kai_pre_job_allocation(self):
        self.scores = {}

    @hookimpl
    def kai_subset_nodes(self, session, job, group, pod_sets, tasks, nodes):
        c = group.topology
        if c is None or not c.topology:
            return None
        tree = self.trees.get(c.topology)
        if tree is None:
            session.add_job_fit_error(job, f"Requested topology {c.topology} does not exist")
            return []
        levels, error = relevant_levels(group.name, c, tree)
        if error:
            session.add_job_fit_error(job, error)
            return []
        search = Search(tree, tasks, nodes)
        root = search.start(c.preferred_level)
        if search.misfit(root)[0]:
            where = "the cluster" if root is tree.root else root.id
            session.add_job_fit_error(job, no_match(job, group.name, tree, c,
                                                    f"not enough resources in {where} to allocate the job"))
            return []
        search.pack(root, c.preferred_level or c.required_level)
        if c.preferred_level:
            self.scores[group.name] = preferred_scores(root, c.preferred_level)
        domains = tree.by_level
        if c.required_level and has_active_tasks(job, pod_sets):
            domains = domains_with_active_tasks(tree, job, pod_sets, c.required_level)
        found, widest_misfits = search.candidates(levels, domains)
        if not found:
            for domain, short, detail in widest_misfits:
                session.add_job_fit_error(job, short, misfit_detail(domain, group.name, detail), WORKLOAD_REASON)
            session.add_job_fit_error(job, no_match(job, group.name, tree, c))
            return []
        return [search.node_set(d) for d in found]

    @hookimpl
    def kai_nodes_alike(self, session, task):
        job = session.jobs.get(task.job) if self.scores else None
        return job is None or self._group_scores(job, task.pod_set) is None

    @hookimpl
    def kai_node_scores(self, session, task, nodes):
        job = session.jobs.get(task.job) if self.scores else None
        if job is None:
            return None
        scores = self._group_scores(job, task.pod_set)
        if scores is None:
            return None
        return [scores.get(n.name, 0.0) for n in nodes]

    def _group_scores(self, job, pod_set: str):
        """The scores of the task's pod set, else of its nearest ancestor group that has some."""
        if pod_set in self.scores:
            return self.scores[pod_set]
        ps = job.pod_sets.get(pod_set)
        parent = ps.parent if ps is not None else None
        while parent is not None:
            if parent in self.scores:
                return self.scores[parent]
            parent = job.subgroups[parent].parent
        return self.scores.get(ROOT_GROUP)


def build(arguments):
    if arguments:
        raise ValueError(f"takes no arguments, got {', '.join(sorted(arguments))}")
    return TopologyPlugin()
