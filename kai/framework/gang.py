"""Gang helpers: which tasks of a job to place next, its subgroup tree, and when a job must be pipelined."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Container
from typing import TYPE_CHECKING

from kai.api import ACTIVE_ALLOCATED, ALLOCATED, Job, Member, PodSet, SubGroup, Task, TaskStatus

if TYPE_CHECKING:
    from _typeshed import SupportsAllComparisons

    from kai.framework.session import Session

    #: Child subgroups and pod sets of the root and every subgroup, by group name.
    GroupChildren = dict[str, tuple[list[SubGroup], list[PodSet]]]


def ordered_pod_sets(session: Session, job: Job) -> list[PodSet]:
    """The job's pod sets in subgroup order (each against its gang size)."""
    if len(job.pod_sets) == 1:
        return list(job.pod_sets.values())
    counts = job.counts(ACTIVE_ALLOCATED)
    return [job.pod_sets[m.name] for m in _ordered(session, job, [_pod_set_member(ps, counts) for ps in
                                                                  job.pod_sets.values()])]


def _pod_set_member(ps: PodSet, counts: dict[str, int]) -> Member:
    return Member(ps.name, True, counts.get(ps.name, 0), ps.min_available)


def _ordered(session: Session, job: Job, members: list[Member], reverse: bool = False) -> list[Member]:
    """``members`` in subgroup order; ``reverse`` flips the comparison (ties keep their order)."""
    sign = -1 if reverse else 1
    key: Callable[[Member], SupportsAllComparisons] = functools.cmp_to_key(
        lambda a, b: sign * session.compare_members(job, a, b))
    return sorted(members, key=key)


class _Tree:
    """One job's subgroup tree with its active allocated tasks counted, walked as KAI walks it."""

    def __init__(self, session: Session, job: Job, counts: dict[str, int] | None = None) -> None:
        self.session, self.job = session, job
        self.counts = job.counts(ACTIVE_ALLOCATED) if counts is None else counts

    def members(self, group: str | None, reverse: bool = False) -> list[Member]:
        groups, pod_sets = self.job.members(group)
        found = [Member(g.name, False, self.job.satisfied_members(g.name, self.counts),
                        self.job.required_members(g.name)) for g in groups]
        found += [_pod_set_member(ps, self.counts) for ps in pod_sets]
        return _ordered(self.session, self.job, found, reverse)

    def satisfied(self, group: str | None) -> bool:
        return self.job.satisfied_members(group, self.counts) >= self.job.required_members(group)

    def pod_sets_under(self, group: str | None) -> list[str]:
        groups, pod_sets = self.job.members(group)
        return [ps.name for ps in pod_sets] + [n for g in groups for n in self.pod_sets_under(g.name)]


def tasks_to_allocate(session: Session, job: Job, candidates: Container[TaskStatus] = (TaskStatus.PENDING,),
                      also: Container[str] = (), admission: bool = True) -> list[Task]:
    """KAI's next allocation step of a job: tasks in ``candidates`` statuses or whose uid is in ``also``
    (victims evicted in a simulation, to be placed again).

    Walking the subgroup tree from the root: a node that is not satisfied takes, in subgroup order, the
    members with something to give until as many as it still misses have given (``min_subgroup``, else
    all), skipping satisfied ones; a pod set takes the tasks it misses to its gang size. A satisfied node
    grows elastically: the first member with something to take gives it, a pod set one task.

    With ``admission`` (a step to place, not victims to put back nor a share to count) a gang is taken
    whole or not at all: a pod set below its gang size gives nothing unless its candidates fill it, and
    a node that is not satisfied nothing unless enough of its members give (KAI's gang admission floor).
    """
    if len(job.pod_sets) == 1 and not job.subgroups and job.min_subgroup is None:  # one pod set: no tree to walk
        return _from_only_pod_set(session, job, candidates, also, admission)
    waiting: dict[str, list[Task]] = {name: [] for name in job.pod_sets}
    counts = dict.fromkeys(job.pod_sets, 0)
    for t in job.tasks.values():
        if t.pod_set not in waiting:
            continue
        if t.status in ACTIVE_ALLOCATED:
            counts[t.pod_set] += 1
        elif t.status in candidates or t.uid in also:
            waiting[t.pod_set].append(t)

    def from_pod_set(name: str) -> list[Task]:
        pending = sorted(waiting[name], key=session.task_key)
        return _step(pending, job.pod_sets[name].min_available - counts[name], admission)

    tree = _Tree(session, job, counts)

    def from_member(m: Member) -> list[Task]:
        return from_pod_set(m.name) if m.is_pod_set else from_group(m.name)

    def from_group(group: str | None) -> list[Task]:
        members = tree.members(group)
        if not tree.satisfied(group):
            missing = job.required_members(group) - sum(1 for m in members if m.satisfied)
            tasks: list[Task] = []
            for m in members:
                if missing <= 0:
                    break
                if not m.satisfied and (given := from_member(m)):
                    tasks += given
                    missing -= 1
            return [] if admission and missing > 0 else tasks
        for m in members:
            tasks = from_member(m)
            if tasks:
                return tasks
        return []

    return from_group(None)


def _step(pending: list[Task], missing: int, admission: bool) -> list[Task]:
    """A pod set's share of the step from its ordered candidates: what it misses to its gang size (nothing
    with ``admission`` when they fall short), or one task past it."""
    if missing <= 0:
        return pending[:1]
    return [] if admission and len(pending) < missing else pending[:missing]


def _from_only_pod_set(session: Session, job: Job, candidates: Container[TaskStatus],
                       also: Container[str], admission: bool) -> list[Task]:
    """:func:`tasks_to_allocate` of a job with one pod set and no subgroups."""
    ((name, ps),) = job.pod_sets.items()
    active, pending = 0, []
    for t in job.tasks.values():
        if t.pod_set != name:
            continue
        if t.status in ACTIVE_ALLOCATED:
            active += 1
        elif t.status in candidates or t.uid in also:
            pending.append(t)
    if len(pending) > 1:
        pending.sort(key=session.task_key)
    return _step(pending, ps.min_available - active, admission)


def core_tasks(job: Job, placed: Collection[str]) -> set[str]:
    """The core of a semi-preemptible job placed as ``placed`` (task uids): its minimal satisfying set. At the root
    and at every subgroup, its first members holding placed pods (subgroups, then pod sets, in definition order)
    up to its minimum (``minSubGroup``, else all); at every pod set taken, its first ``min_available`` placed tasks
    in task order. :func:`tasks_to_evict` never offers these of a semi-preemptible job."""
    by_set: dict[str, list[str]] = {name: [] for name in job.pod_sets}
    for t in job.tasks.values():
        if t.uid in placed and t.pod_set in by_set:
            by_set[t.pod_set].append(t.uid)
    core: set[str] = set()

    def take(group: str | None) -> bool:
        """Take the core of ``group``; whether it has any."""
        groups, pod_sets = job.members(group)
        left, before = job.required_members(group), len(core)
        for g in groups:
            if left > 0 and take(g.name):
                left -= 1
        for ps in pod_sets:
            if left > 0 and by_set[ps.name]:
                core.update(by_set[ps.name][:ps.min_available])
                left -= 1
        return len(core) > before

    take(None)
    return core


def evictable(session: Session, task: Task) -> bool:
    """Whether ``task`` can be a victim: it holds or reserves resources on a node of the session (a pod
    bound to a node that is gone holds nothing to free), and is not a victim re-placed in this session
    (its pod is already being evicted)."""
    if task.status is TaskStatus.PIPELINED:
        return task.uid not in session.evicted and task.node in session.node_by_name
    return task.status in ALLOCATED and task.node in session.node_by_name


def tasks_to_evict(session: Session, job: Job) -> tuple[list[Task], bool]:
    """KAI's next eviction step of a victim job and whether tasks are left after it.

    Members are taken in reverse subgroup order. Elastic surplus goes first: the last task (in task
    order) of a pod set above its gang size, found depth first where the tree has any; then, in a node
    with more satisfied members than it needs, a whole member. Without surplus the whole job goes --
    unless it is semi-preemptible: its core (its gang) is not evicted, so nothing goes.
    """
    if len(job.pod_sets) == 1 and not job.subgroups and job.min_subgroup is None:  # one pod set: no tree to walk
        return _evict_from_pod_set(session, job, next(iter(job.pod_sets.values())))
    tree = _Tree(session, job)
    running: dict[str, list[Task]] = {name: [] for name in job.pod_sets}
    total = 0
    for t in job.tasks.values():
        if evictable(session, t) and t.pod_set in running:
            running[t.pod_set].append(t)
            total += 1

    def last_first(names: list[str]) -> list[Task]:
        return [t for n in names for t in sorted(running[n], key=session.task_key, reverse=True)]

    def surplus(m: Member) -> bool:
        if m.is_pod_set:
            return m.active > m.required
        return m.active > m.required or any(surplus(c) for c in tree.members(m.name))

    def elastic(group: str | None) -> list[Task]:
        if job.satisfied_members(group, tree.counts) == 0:
            return []
        members = tree.members(group, reverse=True)
        if any(surplus(m) for m in members) or job.satisfied_members(group, tree.counts) > job.required_members(
                group):
            for m in members:
                if m.is_pod_set:
                    tasks = last_first([m.name])[:1] if m.active > m.required else []
                else:
                    tasks = elastic(m.name)
                if tasks:
                    return tasks
        if job.required_members(group) < job.satisfied_members(group, tree.counts):
            for m in members:
                tasks = last_first([m.name] if m.is_pod_set else tree.pod_sets_under(m.name))
                if tasks:
                    return tasks
        return []

    result = elastic(None) or ([] if job.semi_preemptible else last_first(tree.pod_sets_under(None)))
    return result, 0 < len(result) < total


def _evict_from_pod_set(session: Session, job: Job, ps: PodSet) -> tuple[list[Task], bool]:
    """:func:`tasks_to_evict` of a job that is one pod set: its last task when it runs above its gang
    size, else all of it (none of a semi-preemptible one)."""
    running, active = [], 0
    for t in job.tasks.values():
        if t.pod_set == ps.name:
            active += t.status in ACTIVE_ALLOCATED
            if evictable(session, t):
                running.append(t)
    running.sort(key=session.task_key, reverse=True)
    result = running[:1] if active > ps.min_available else [] if job.semi_preemptible else running
    return result, 0 < len(result) < len(running)


#: KAI's name of the root of a job's subgroup tree (it carries the job's own topology constraint).
ROOT_GROUP = ""


def root_group(job: Job) -> SubGroup:
    return SubGroup(ROOT_GROUP, None, job.topology)


def group_children(session: Session, job: Job) -> GroupChildren:
    """Child subgroups (by name) and pod sets (in pod-set order) of the root and every subgroup, by group name."""
    if not job.subgroups:
        return {ROOT_GROUP: ([], ordered_pod_sets(session, job))}
    children: GroupChildren = {ROOT_GROUP: ([], [])}
    children.update((name, ([], [])) for name in job.subgroups)
    for sg in sorted(job.subgroups.values(), key=lambda g: g.name.encode()):
        children[sg.parent or ROOT_GROUP][0].append(sg)
    for ps in ordered_pod_sets(session, job):
        children[ps.parent or ROOT_GROUP][1].append(ps)
    return children


def pod_sets_under(children: GroupChildren, group: str) -> list[str]:
    """Names of every pod set below ``group`` (depth first)."""
    groups, pod_sets = children[group]
    names = [ps.name for ps in pod_sets]
    for sg in groups:
        names.extend(pod_sets_under(children, sg.name))
    return names


def should_pipeline(job: Job) -> bool:
    """Some pod set has pipelined tasks while its allocated (not pipelined) tasks are below its gang size."""
    for name, ps in job.pod_sets.items():
        pipelined = allocated = 0
        for t in job.tasks.values():
            if t.pod_set != name:
                continue
            if t.status is TaskStatus.PIPELINED:
                pipelined += 1
            elif t.status in ACTIVE_ALLOCATED:
                allocated += 1
        if pipelined and allocated < ps.min_available:
            return True
    return False
