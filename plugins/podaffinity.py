"""``podaffinity``: preferred pod affinity and anti-affinity as node scores (KAI's ``podaffinity`` plugin).

kube-scheduler's InterPodAffinity score as KAI uses it: for every pod on a node (placed, pipelined or
releasing, in this session too), the weight of each preferred affinity term of the task it matches is
added to that node's topology domain (subtracted for anti-affinity), and so is the weight of each
preferred term of that pod the task matches. A node scores the sum over the domains it belongs to;
KAI does not normalise the sum but multiplies it by its weight of Kubernetes' scores. Required terms
are filters (plugin ``predicates``); as in KAI, they add nothing here (hard pod affinity weight 0).
Without preferred terms on any task of the session the plugin scores nothing and costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from kai.sdk import JobsKey, Task, hookimpl, jobs_where

#: KAI's weight of the scores of Kubernetes' plugins, on this scheduler's scale (a tenth of the nominated
#: node's score, as in KAI).
SCORE = 100_000.0


def _prefers(task: Task) -> bool:
    return bool(task.preferred_pod_affinity or task.preferred_pod_anti_affinity)


def _any_prefers(job) -> bool:
    return any(_prefers(t) for t in job.tasks.values())


def _add(scores: dict[str, dict[str, float]], terms, sign: int, owner: Task, other: Task, labels: dict) -> None:
    """Add the weight of each of ``owner``'s ``terms`` that ``other`` matches to the domain of ``labels``."""
    for weighted in terms:
        term = weighted.term
        value = labels.get(term.topology_key)
        if value is not None and term.matches(owner.namespace, other.namespace, other.labels):
            domains = scores.setdefault(term.topology_key, {})
            domains[value] = domains.get(value, 0.0) + sign * weighted.weight


#: The memo key of the jobs with preferred pod affinity or anti-affinity terms as built.
PREFERRING = JobsKey("podaffinity/preferring")


class PodAffinity:
    name = "podaffinity"

    def __init__(self) -> None:
        #: The session's tasks with preferred terms (placed or not); empty: nothing to score.
        self.preferring: list[Task] = []

    @hookimpl
    def kai_session_open(self, session):
        preferring = jobs_where(session, PREFERRING, _any_prefers)
        self.preferring = [t for uid, j in session.jobs.items() if uid in preferring
                           for t in j.tasks.values() if _prefers(t)] if preferring else []

    @hookimpl
    def kai_session_job_added(self, session, job):
        self.preferring += [t for t in job.tasks.values() if _prefers(t)]

    def _placed(self, session, task: Task) -> Iterable[tuple]:
        """(node, task) of the pods that can matter: all of them when ``task`` prefers, else those that prefer."""
        if _prefers(task):
            return ((n, t) for n in session.nodes for t in n.tasks.values() if t is not task)
        by_name = session.node_by_name
        return ((n, t) for t in self.preferring
                if t is not task and (n := by_name.get(t.node)) is not None and t.uid in n.tasks)

    def topology_scores(self, session, task: Task) -> dict[str, dict[str, float]]:
        """Summed weights by topology key and domain (label value)."""
        scores: dict[str, dict[str, float]] = {}
        for node, other in self._placed(session, task):
            labels = node.labels
            _add(scores, task.preferred_pod_affinity, 1, task, other, labels)
            _add(scores, task.preferred_pod_anti_affinity, -1, task, other, labels)
            _add(scores, other.preferred_pod_affinity, 1, other, task, labels)
            _add(scores, other.preferred_pod_anti_affinity, -1, other, task, labels)
        return scores

    @hookimpl
    def kai_nodes_alike(self):
        return not self.preferring  # preferred terms score nodes by their labels

    @hookimpl
    def kai_node_scores(self, session, task, nodes):
        if not self.preferring:
            return None
        scores = self.topology_scores(session, task)
        if not scores:
            return None
        out = []
        for node in nodes:
            labels = node.labels
            out.append(SCORE * sum(domains.get(labels[key], 0.0) for key, domains in scores.items() if key in labels))
        return out


def build(arguments):
    return PodAffinity()
