"""Gang helpers: which tasks of a job to place next, its subgroup tree, and when a job must be pipelined."""

from __future__ import annotations

import functools
from collections.abc import Callable, Container
from typing import TYPE_CHECKING

from kai.api import ACTIVE_ALLOCATED, ALLOCATED, Job, PodSet, SubGroup, Task, TaskStatus

if TYPE_CHECKING:
    from _typeshed import SupportsAllComparisons

    from kai.framework.session import Session

    #: Child subgroups and pod sets of the root and every subgroup, by group name.
    GroupChildren = dict[str, tuple[list[SubGroup], list[PodSet]]]


def ordered_pod_sets(session: Session, job: Job) -> list[PodSet]:
    key: Callable[[PodSet], SupportsAllComparisons] = functools.cmp_to_key(
        lambda a, b: session.compare_pod_sets(job, a, b))
    return sorted(job.pod_sets.values(), key=key)


def tasks_to_allocate(session: Session, job: Job, candidates: Container[TaskStatus] = (TaskStatus.PENDING,),
                      also: Container[str] = ()) -> list[Task]:
    """The tasks of the next allocation step, in pod-set order then task order.

    Pod sets below their gang size get the tasks they miss; otherwise one more task is taken
    (elastic growth is one task per step). As many pod sets with waiting tasks are taken as are
    below their gang size, or one when all are satisfied. Tasks in ``candidates`` statuses are taken,
    and tasks whose uid is in ``also`` (victims evicted in a simulation, to be placed again).
    """
    pod_sets = ordered_pod_sets(session, job)
    active = {ps.name: 0 for ps in pod_sets}
    waiting: dict[str, list[Task]] = {ps.name: [] for ps in pod_sets}
    for t in job.tasks.values():
        if t.pod_set not in active:
            continue
        if t.status in ACTIVE_ALLOCATED:
            active[t.pod_set] += 1
        elif t.status in candidates or t.uid in also:
            waiting[t.pod_set].append(t)
    unsatisfied = sum(1 for ps in pod_sets if active[ps.name] < ps.min_available)
    result: list[Task] = []
    taken = 0
    for ps in pod_sets:
        if taken == max(unsatisfied, 1):
            break
        if not waiting[ps.name]:
            continue
        pending = sorted(waiting[ps.name], key=session.task_key)
        missing = ps.min_available - active[ps.name]
        result.extend(pending[: missing if missing > 0 else 1])
        taken += 1
    return result


def evictable(session: Session, task: Task) -> bool:
    """Whether ``task`` can be a victim: it holds or reserves resources on a node of the session (a pod
    bound to a node that is gone holds nothing to free), and is not a victim re-placed in this session
    (its pod is already being evicted)."""
    if task.status is TaskStatus.PIPELINED:
        return task.uid not in session.evicted and task.node in session.node_by_name
    return task.status in ALLOCATED and task.node in session.node_by_name


def tasks_to_evict(session: Session, job: Job) -> tuple[list[Task], bool]:
    """KAI's next eviction step of a victim job and whether tasks are left after it.

    Pod sets are taken in reverse pod-set order: only the first one when some pod set is above its
    gang size, else all of them. From a pod set above its gang size one task is taken (the last in
    task order), from any other all its tasks (the job is evicted down to nothing).
    """
    pod_sets = ordered_pod_sets(session, job)[::-1]
    running: dict[str, list[Task]] = {ps.name: [] for ps in pod_sets}
    total = 0
    for t in job.tasks.values():
        if evictable(session, t) and t.pod_set in running:
            running[t.pod_set].append(t)
            total += 1
    above = any(len(running[ps.name]) > ps.min_available for ps in pod_sets)
    result: list[Task] = []
    for ps in pod_sets[: 1 if above else len(pod_sets)]:
        tasks = sorted(running[ps.name], key=session.task_key, reverse=True)
        result.extend(tasks[:1] if len(tasks) > ps.min_available else tasks)
    return result, len(result) < total


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
