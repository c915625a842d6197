"""A Snapshot: the cluster facts one scheduling session starts from, validated.

Bad input does not stop the cycle: a queue whose parent is missing, a queue in a cycle, a queue
with a negative (other than -1), NaN or infinite quota, limit or over-quota weight, a limit below
its deserved quota or a priority that is not a whole number (each with its subtree; the fair share
is divided over the rest of the tree), a topology breaking the CRD's rules, a job whose subgroup tree names
an unknown parent or has a cycle, a job naming an unknown or non-leaf queue, a task on a node that
is gone -- each is recorded as a :class:`Problem` naming the object and left out; everything else
is scheduled. A task whose GPU request can never be scheduled is recorded too and stays pending
with the reason as its fit error.

A session changes the snapshot's tasks and jobs as it decides, and they show its outcome until the
snapshot is rewound: :meth:`Snapshot.rewind` (which the next session on the snapshot calls first)
puts back everything the session changed (:mod:`kai.framework.journal`), so one snapshot serves
cycle after cycle without rebuilding its domain objects. Its nodes and jobs are not to be changed
otherwise between sessions: the placed tasks' node accounting of an earlier session is reused. A snapshot that
follows another (:meth:`Snapshot.follow`) takes over what was worked out there for the nodes and jobs it kept.
"""

from __future__ import annotations

import itertools
import math
import operator
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from kai.api import (
    ACTIVE_USED,
    MAX_RESOURCE_TYPES,
    UNLIMITED,
    DisruptionBudget,
    DynamicResources,
    Job,
    Node,
    PodSet,
    Queue,
    QuotaSpec,
    ResourceTypeQuota,
    Storage,
    SubGroup,
    Topology,
    TopologyConstraint,
    back_extended_gpus,
    names,
    selectors_overlap,
)
from kai.framework.journal import Journal
from kai.framework.memo import Memo
from kai.framework.usage import Usage

if TYPE_CHECKING:
    from kai.framework.nodes import NodeArrays, NodeInfo

#: Problem reason of a task (or a placement) on a node that does not exist.
NODE_NOT_FOUND = names.REASON_NODE_NOT_FOUND
#: Problem reason of a node whose placed pods ask more than it has (found when a session opens).
NODE_OVERCOMMITTED = names.REASON_NODE_OVERCOMMITTED


@attrs.define(frozen=True)
class Problem:
    """Something wrong with an input object: ``kind`` is node/queue/job/task, ``name`` the object."""

    kind: str
    name: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message}"


@attrs.define(eq=False)
class Snapshot:
    nodes: list[Node]
    queues: dict[str, Queue]
    jobs: dict[str, Job]
    now: float
    #: Valid topologies by name.
    topologies: dict[str, Topology] = attrs.field(factory=dict)
    problems: list[Problem] = attrs.field(factory=list)
    #: Jobs left out because of a problem (their names), so drivers can still report on them.
    rejected_jobs: dict[str, Job] = attrs.field(factory=dict)
    #: Historical usage per queue name, (CPU, memory, GPU) fractions of capacity (time-based fair share);
    #: set by the driver from its usage source, empty without one.
    usage: Usage = attrs.field(factory=dict)
    #: The ConfigMaps that exist, as ``namespace/name`` (a task naming another in ``config_maps`` waits).
    config_maps: frozenset[str] = frozenset()
    #: The cluster's claims, volumes and storage classes (tasks with ``claims`` are checked against them).
    storage: Storage = attrs.field(factory=Storage)
    #: The cluster's DeviceClasses, ResourceSlices and ResourceClaims (tasks with ``resource_claims``).
    dra: DynamicResources = attrs.field(factory=DynamicResources)
    #: The cluster's PodDisruptionBudgets (:mod:`kai.framework.disruption`).
    budgets: tuple[DisruptionBudget, ...] = ()
    #: What the last session on the snapshot changed (until :meth:`rewind`).
    journal: Journal | None = attrs.field(default=None, init=False)
    #: The node amounts and views with the placed tasks on them, kept by the first session that reused the snapshot
    #: (by the first session when :attr:`followed`).
    placed: tuple[NodeArrays, list[NodeInfo]] | None = attrs.field(default=None, init=False)
    #: Whether another snapshot is to follow this one (:meth:`follow`): its first session keeps :attr:`placed`, and
    #: plugins keep in the memo what the next snapshot takes over.
    followed: bool = attrs.field(default=False, init=False)
    #: The placed accounting of the snapshot this one follows (:meth:`follow`), until a session takes it over.
    before: tuple[NodeArrays, list[NodeInfo]] | None = attrs.field(default=None, init=False)

    #: What the kernel and plugins work out from the snapshot as built (before a session changes it), by typed
    #: key: kept for the next sessions on the snapshot.
    memo: Memo = attrs.field(factory=Memo, init=False)
    #: The jobs found whole when the snapshot was built (no problem of their own or of a task) by uid, and the node
    #: names their placed tasks were checked against: a snapshot built to follow this one checks them no more (told
    #: which jobs may have changed, it takes them over in place).
    whole: dict[str, Job] = attrs.field(factory=dict, init=False)
    whole_on: frozenset[str] = attrs.field(default=frozenset(), init=False)
    #: The uids of the jobs kept but not found whole: a snapshot following this one checks them again.
    flawed: set[str] = attrs.field(factory=set, init=False)
    #: The memo of the snapshot this one follows (:meth:`follow`): what was worked out per job or node there holds
    #: for each that this snapshot took over (the very object, as built).
    memo_before: Memo = attrs.field(factory=Memo, init=False)
    #: The uids of the jobs that are not the very objects of the snapshot this one follows (new or built again),
    #: and of its jobs this one has no more; None when it follows none.
    changed: set[str] | None = attrs.field(default=None, init=False)
    gone: set[str] = attrs.field(factory=set, init=False)
    #: The jobs of :attr:`changed` and :attr:`gone` as the snapshot this one follows had them, by uid.
    replaced: dict[str, Job] = attrs.field(factory=dict, init=False)
    #: Each job's rank in the order the jobs were given (those left out too), worked out by :func:`build_snapshot`
    #: and handed over to the snapshot that follows; None when handed over.
    ranks: dict[str, int] | None = attrs.field(default=None, init=False)

    def in_order(self, uids: Collection[str]) -> list[str]:
        """Those of ``uids`` that are jobs of the snapshot, in its order: sorted by rank, so that a pass over some
        jobs costs what it looks at (a job that arrived in a session, which has none, makes it a pass over all)."""
        jobs, ranks = self.jobs, self.ranks
        found = [uid for uid in uids if uid in jobs]
        if ranks is not None and all(map(ranks.__contains__, found)):
            return sorted(found, key=ranks.__getitem__)
        return list(filter(set(found).__contains__, jobs))

    def follow(self, previous: Snapshot | None, changed: set[str] | None = None, gone: set[str] | None = None
               ) -> None:
        """This snapshot follows ``previous`` (rewound; the tasks and jobs taken over from it are as they were
        built there): its first session takes over the node accounting ``previous`` kept (``previous`` has it no
        more), accounts again only the nodes whose tasks or amounts changed, and keeps it for the snapshot after
        it; what was worked out per job in ``previous``'s memo is there for the jobs taken over
        (:attr:`memo_before`). With no ``previous`` there is nothing to take over, and the accounting is kept for
        the next. ``changed``: the uids of the jobs that are not the very objects of ``previous``, and ``gone``
        those of its jobs this one has not, when the caller knows them."""
        self.followed = True
        self.before = previous.placed if previous is not None else None
        self.memo_before = previous.memo if previous is not None else Memo()
        if previous is not None:
            previous.placed = None
            before = previous.jobs
            if changed is None:
                changed = {uid for uid, job in self.jobs.items() if before.get(uid) is not job}
            self.changed = changed
            if gone is None:
                # every job but those changed is one of ``previous``'s: none is gone when they are as many as it had
                common = len(self.jobs) - sum(uid not in before for uid in changed)
                gone = before.keys() - self.jobs.keys() if common != len(before) else set()
            self.gone = gone
            self.replaced = {uid: before[uid] for uid in changed | self.gone if uid in before}

    def rewind(self) -> None:
        """Undo what the last session changed on the snapshot's tasks, jobs and problems (nothing when none)."""
        if self.journal is not None:
            self.journal.rewind(self)
            self.journal = None


#: The parent of every queue when fairness is at the project level only (KAI's name).
PROJECT_LEVEL_PARENT = "default"


def project_level_queues(queues: Iterable[Queue], now: float) -> list[Queue]:
    """KAI's ``--full-hierarchy-fairness=false``: the queues that have a parent, each as a child of one parent
    named ``default`` with unlimited deserved quota and limit and over-quota weight 1 (created ``now``); the
    queues without a parent are left out, so fair share is divided among the projects alone."""
    unlimited = QuotaSpec(UNLIMITED, UNLIMITED, 1.0)
    parent = Queue(PROJECT_LEVEL_PARENT, gpu=unlimited, cpu=unlimited, memory=unlimited, creation=now)
    return [parent, *(attrs.evolve(q, parent=PROJECT_LEVEL_PARENT) for q in queues if q.parent)]


def _bad_quota(q: Queue) -> str | None:
    """Why the queue's priority or quotas cannot be divided, or None."""
    if isinstance(q.priority, bool) or not isinstance(q.priority, int):
        return f"priority {q.priority!r} is not a whole number"
    specs = [(res, getattr(q, res)) for res in ("gpu", "cpu", "memory")]
    specs += [(f"resource type {t.name} gpu", t.gpu) for t in q.resource_types]
    for res, spec in specs:
        for field in ("deserved", "limit", "over_quota_weight"):
            v = getattr(spec, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                return f"{res} {field} is not a number"
            if math.isinf(v):
                return f"{res} {field} is infinite; use -1 for unlimited"
            if v < 0 and v != UNLIMITED:
                return f"{res} {field} is negative ({v:g}); only -1 (unlimited) may be negative"
        if spec.limit != UNLIMITED and spec.deserved != UNLIMITED and spec.limit < spec.deserved:
            return f"{res} limit {spec.limit:g} is below its deserved quota {spec.deserved:g}"
    names = [t.name for t in q.resource_types]
    if len(set(names)) < len(names):
        return "a resource type is given twice"
    return _bad_types(q.resource_types, {})


def _bad_types(types: Iterable[ResourceTypeQuota], known: dict[str, ResourceTypeQuota]) -> str | None:
    """Why resource types cannot be told apart -- a type without a name or node selector, one named twice
    with other selectors, two whose selectors one node could match -- given the ``known`` ones, or None;
    ``known`` gets the new types."""
    for t in types:
        if not t.name or not t.node_selector:
            return f"resource type {t.name or '(unnamed)'} needs a name and a node selector"
        other = known.get(t.name)
        if other is not None:
            if other.node_selector != t.node_selector:
                return f"resource type {t.name} has another node selector than where it was first given"
            continue
        for other in known.values():
            if selectors_overlap(other.node_selector, t.node_selector):
                return f"resource types {other.name} and {t.name} have node selectors one node could match"
        if len(known) >= MAX_RESOURCE_TYPES:
            return f"resource type {t.name} is one more than the {MAX_RESOURCE_TYPES} a cluster may have"
        known[t.name] = t
    return None


def _valid_queues(queues: list[Queue], problems: list[Problem], invalid: dict[str, str]) -> dict[str, Queue]:
    """The queues that can be scheduled; ``invalid`` gets why each other one cannot."""
    by_name: dict[str, Queue] = {}
    for q in queues:
        if q.name in by_name:
            problems.append(Problem("queue", q.name, "DuplicateQueue", "queue is defined twice; the first is kept"))
            continue
        by_name[q.name] = q
    bad: dict[str, str] = {}
    types: dict[str, ResourceTypeQuota] = {}  # every queue's resource types, for a queue that disagrees
    for q in by_name.values():
        why = _bad_quota(q) or _bad_types(q.resource_types, types)
        if why:
            bad[q.name] = why
    # Walk each queue up to a root: a missing or bad ancestor, or a cycle, makes the queue invalid.
    valid: dict[str, Queue] = {}
    for q in by_name.values():
        seen: list[str] = []
        cur: Queue | None = q
        why = None
        while cur is not None:
            if cur.name in seen:
                why = f"queue hierarchy has a cycle: {' -> '.join(seen + [cur.name])}"
                break
            seen.append(cur.name)
            if cur.name in bad:
                why = bad[cur.name] if cur is q else f"ancestor queue {cur.name} is invalid ({bad[cur.name]})"
                break
            if cur.parent is None:
                break
            parent = by_name.get(cur.parent)
            if parent is None:
                why = f"parent queue {cur.parent!r} does not exist"
                break
            cur = parent
        if why:
            problems.append(Problem("queue", q.name, "InvalidQueue", why))
            invalid[q.name] = why
        else:
            valid[q.name] = q
    return valid


def _valid_topologies(topologies: Iterable[Topology], problems: list[Problem]) -> dict[str, Topology]:
    valid: dict[str, Topology] = {}
    for t in topologies:
        if t.name in valid:
            problems.append(Problem("topology", t.name, "DuplicateTopology",
                                    "topology is listed twice; the first is kept"))
            continue
        why = t.problem()
        if why:
            problems.append(Problem("topology", t.name, "InvalidTopology", why))
            continue
        valid[t.name] = t
    return valid


def _resolve_aliases(job: Job, topologies: dict[str, Topology]) -> None:
    """Constraints of the job that name a level by its alias (of ``topologies``, those with aliases) name its
    node label instead."""
    holders: list[Job | SubGroup | PodSet] = [job, *job.subgroups.values(), *job.pod_sets.values()]
    for holder in holders:
        tc = holder.topology
        topology = topologies.get(tc.topology) if tc is not None else None
        if tc is not None and topology is not None:
            required, preferred = topology.level(tc.required_level), topology.level(tc.preferred_level)
            if (required, preferred) != (tc.required_level, tc.preferred_level):
                holder.topology = TopologyConstraint(tc.topology, required, preferred)


def _subgroup_problem(job: Job) -> str | None:
    """Why the job's subgroup tree cannot be walked from its root, or None."""
    for sg in job.subgroups.values():
        if sg.name in job.pod_sets:
            return f"{sg.name!r} is both a subgroup and a pod set"
        chain, parent = [sg.name], sg.parent
        while parent is not None:
            if parent not in job.subgroups:
                return f"subgroup {chain[-1]!r} names parent {parent!r}, which is not a subgroup of the job"
            if parent in chain:
                return f"subgroup tree has a cycle: {' -> '.join(chain + [parent])}"
            chain.append(parent)
            parent = job.subgroups[parent].parent
    for ps in job.pod_sets.values():
        if ps.parent is not None and ps.parent not in job.subgroups:
            return f"pod set {ps.name!r} names parent {ps.parent!r}, which is not a subgroup of the job"
    return None


def build_snapshot(nodes: Iterable[Node], queues: Iterable[Queue], jobs: Iterable[Job] | Mapping[str, Job],
                   now: float | None = None, topologies: Iterable[Topology] = (), config_maps: Iterable[str] = (),
                   storage: Storage | None = None, dra: DynamicResources | None = None,
                   previous: Snapshot | None = None, budgets: Iterable[DisruptionBudget] = (),
                   touched: set[str] | None = None) -> Snapshot:
    """Validate the facts and assemble a snapshot (see the module docstring for what is left out); ``jobs`` in
    order, or by uid.

    With ``previous`` the snapshot follows it (:meth:`Snapshot.follow`): a job it found whole, when it is the
    very object (as built) and the nodes are the same, has its subgroups and tasks not checked again. With
    ``touched`` too -- the uids of the jobs that may not be the very objects ``previous`` was built from (new,
    built again or gone); ``jobs`` a dict by uid, the others in the same order and the new ones after them --
    only those and the jobs ``previous`` did not find whole are looked at, so the cost follows what changed.
    """
    problems: list[Problem] = []
    valid_topologies = _valid_topologies(topologies, problems)
    aliased = {name: t for name, t in valid_topologies.items() if t.aliases}
    node_list: list[Node] = list(nodes)
    names: set[str] = set(map(_NAME, node_list))
    if len(names) != len(node_list):  # a node listed twice
        given, node_list, names = node_list, [], set()
        for n in given:
            if n.name in names:
                problems.append(Problem("node", n.name, "DuplicateNode", "node is listed twice; the first is kept"))
                continue
            names.add(n.name)
            node_list.append(n)
    invalid: dict[str, str] = {}
    valid_queues = _valid_queues(list(queues), problems, invalid)
    parents = {q.parent for q in valid_queues.values() if q.parent}
    node_names = frozenset(names)
    checked = previous.whole if previous is not None and previous.whole_on == node_names else {}
    whole: dict[str, Job] = {}
    kept: dict[str, Job] = {}
    rejected: dict[str, Job] = {}
    flawed: set[str] = set()
    changed: set[str] | None = None
    gone: set[str] | None = None
    leaves = valid_queues.keys() - parents
    before = previous.jobs if previous is not None else {}
    following = bool(checked) and not aliased and previous is not None and \
        previous.queues.keys() - _parents(previous) <= leaves
    if following and touched is not None and isinstance(jobs, dict):
        assert previous is not None
        ranks = _follow_ranks(jobs, touched, previous)
        kept, whole, flawed, changed, gone = _follow_jobs(
            jobs, touched, previous, lambda job, found: _check_job(job, invalid, valid_queues, parents, names, found),
            problems, rejected, ranks)
    else:
        job_list: list[Job] = list(jobs.values() if isinstance(jobs, Mapping) else jobs)
        uids = list(map(_UID, job_list))
        ranks = dict(zip(reversed(uids), range(len(uids) - 1, -1, -1)))  # a job given twice: the first
        if following:
            kept = dict(zip(uids, job_list))
        if len(kept) == len(job_list) and kept:  # following, no job twice: only those not checked there are checked
            whole, changed = kept.copy(), set()
            fresh = itertools.compress(job_list, map(operator.is_not, map(checked.get, uids), job_list))
            for job in fresh:
                verdict = _check_job(job, invalid, valid_queues, parents, names, problems)
                if verdict is None:
                    del kept[job.uid], whole[job.uid]
                    rejected[job.uid] = job
                    continue
                if not verdict:
                    del whole[job.uid]
                    flawed.add(job.uid)
                if before.get(job.uid) is not job:
                    changed.add(job.uid)
        else:
            kept = {}
            for job in job_list:
                if job.uid in kept:
                    problems.append(Problem("job", job.name, "DuplicateJob", "job is listed twice; the first is kept"))
                    continue
                verdict = True if checked.get(job.uid) is job and job.queue in leaves else \
                    _check_job(job, invalid, valid_queues, parents, names, problems)
                if verdict is None:
                    rejected[job.uid] = job
                    continue
                if verdict:
                    whole[job.uid] = job
                else:
                    flawed.add(job.uid)
                if aliased:
                    _resolve_aliases(job, aliased)
                kept[job.uid] = job
    if dra is not None:
        back_extended_gpus(dra, node_list)
    snapshot = Snapshot(node_list, valid_queues, kept, time.time() if now is None else now,
                        valid_topologies, problems, rejected, config_maps=frozenset(config_maps),
                        storage=storage if storage is not None else Storage(),
                        dra=dra if dra is not None else DynamicResources(), budgets=tuple(budgets))
    snapshot.whole, snapshot.whole_on, snapshot.flawed, snapshot.ranks = whole, node_names, flawed, ranks
    if previous is not None:
        snapshot.follow(previous, changed, gone)
    return snapshot


def _follow_ranks(jobs: dict[str, Job], touched: set[str], previous: Snapshot) -> dict[str, int]:
    """The ranks of ``jobs`` (by uid), those of ``previous`` (handed over) brought up to date: the touched jobs that
    are gone are dropped, and those new are ranked after the others, found at the end of ``jobs`` -- where the
    jobs given in the order of a store keep them; when they are not all there, ``jobs`` are ranked afresh."""
    ranks, previous.ranks = previous.ranks, None
    if ranks is None:
        return dict(zip(jobs, range(len(jobs))))
    new = set()
    for uid in touched:
        if uid not in jobs:
            ranks.pop(uid, None)
        elif uid not in ranks:
            new.add(uid)
    if not new:
        return ranks
    tail: list[str] = []
    last = -1
    for uid in reversed(jobs):
        if uid not in new:
            last = ranks.get(uid, -2)
            break
        tail.append(uid)
    if len(tail) != len(new) or last == -2:
        return dict(zip(jobs, range(len(jobs))))
    ranks.update(zip(reversed(tail), range(last + 1, last + 1 + len(tail))))
    return ranks


def _follow_jobs(jobs: Mapping[str, Job], touched: set[str], previous: Snapshot,
                 check: Callable[[Job, list[Problem]], bool | None], problems: list[Problem],
                 rejected: dict[str, Job], ranks: dict[str, int]
                 ) -> tuple[dict[str, Job], dict[str, Job], set[str], set[str], set[str]]:
    """The jobs kept, those whole, those kept but not whole, those changed and those gone, when every job of
    ``jobs`` (by uid) but the ``touched`` ones is one ``previous`` was built from and found whole, not whole or
    left out: only the touched ones and those it did not find whole are checked; ``problems`` and ``rejected``
    get theirs in the order of ``jobs``, as a pass over every job gives them."""
    kept, checked, before = dict(jobs), previous.whole, previous.jobs
    whole, previous.whole = checked, {}  # handed over: brought up to date in place (each uid below read, then set)
    fresh = []
    for uid in touched | previous.flawed | previous.rejected_jobs.keys():
        job = kept.get(uid)
        if job is None or checked.get(uid) is not job:
            whole.pop(uid, None)
            if job is not None:
                fresh.append(uid)
    found: list[tuple[str, bool | None, list[Problem]]] = []
    for uid in fresh:
        own: list[Problem] = []
        found.append((uid, check(kept[uid], own), own))
    found.sort(key=lambda entry: ranks[entry[0]])
    flawed: set[str] = set()
    changed: set[str] = set()
    for uid, verdict, own in found:
        problems += own
        job = kept[uid]
        if verdict is None:
            del kept[uid]
            rejected[uid] = job
            continue
        if verdict:
            whole[uid] = job
        else:
            flawed.add(uid)
        if before.get(uid) is not job:
            changed.add(uid)
    gone = {uid for uid in touched | rejected.keys() if uid in before and uid not in kept}
    return kept, whole, flawed, changed, gone


_UID = operator.attrgetter("uid")
_NAME = operator.attrgetter("name")


def _parents(snapshot: Snapshot) -> set[str]:
    return {q.parent for q in snapshot.queues.values() if q.parent}


def _check_job(job: Job, invalid: dict[str, str], valid_queues: dict[str, Queue], parents: set[str],
               nodes: set[str], problems: list[Problem]) -> bool | None:
    """Record the job's problems: None when it is left out (its queue is invalid, missing or not a leaf, or its
    subgroups cannot be walked), else whether it is whole (no problem of a task either)."""
    if job.queue in invalid:
        problems.append(Problem("job", job.name, "InvalidQueue",
                                f"Queue '{job.queue}' is invalid: {invalid[job.queue]}"))
        return None
    if job.queue not in valid_queues:
        problems.append(Problem("job", job.name, "QueueDoesNotExist", f"Queue '{job.queue}' does not exist"))
        return None
    if job.queue in parents:
        problems.append(Problem("job", job.name, "QueueNotLeaf",
                                f"Queue '{job.queue}' is not a leaf queue; jobs must reference leaf queues"))
        return None
    why = _subgroup_problem(job)
    if why:
        problems.append(Problem("job", job.name, "InvalidSubGroups", why))
        return None
    return _task_problems(job, nodes, problems)


def _task_problems(job: Job, nodes: set[str], problems: list[Problem]) -> bool:
    """Record the problems of the job's tasks (an invalid request, placed on a node not in ``nodes``); whether
    there was none."""
    before = len(problems)
    for task in job.tasks.values():
        bad = task.request.problem() if task.invalid is None else None
        if bad is not None:
            task.invalid = f"invalid GPU request: {bad[1]}"
        if task.invalid is not None:
            problems.append(Problem("task", task.uid, "InvalidPod", task.invalid))
        if task.status in ACTIVE_USED and task.node not in nodes:
            problems.append(Problem("task", task.uid, NODE_NOT_FOUND,
                                    f"task is {task.status} on node {task.node!r}, which does not exist; "
                                    "it holds no node resources and is not placed again"))
    return len(problems) == before
