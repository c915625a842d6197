"""Gang helpers: which tasks of a job to place next, and when a job must be pipelined."""

from __future__ import annotations

import functools

from kai.api import ACTIVE_ALLOCATED, Job, Task, TaskStatus


def ordered_pod_sets(session, job: Job):
    key = functools.cmp_to_key(lambda a, b: session.compare_pod_sets(job, a, b))
    return sorted(job.pod_sets.values(), key=key)


def tasks_to_allocate(session, job: Job, candidates=(TaskStatus.PENDING,)) -> list[Task]:
    """The tasks of the next allocation step, in pod-set order then task order.

    Pod sets below their gang size get the tasks they miss; otherwise one more task is taken
    (elastic growth is one task per step). As many pod sets are looked at as are below their gang
    size, or one when all are satisfied.
    """
    pod_sets = ordered_pod_sets(session, job)
    active = {ps.name: 0 for ps in pod_sets}
    waiting: dict[str, list[Task]] = {ps.name: [] for ps in pod_sets}
    for t in job.tasks.values():
        if t.pod_set not in active:
            continue
        if t.status in ACTIVE_ALLOCATED:
            active[t.pod_set] += 1
        elif t.status in candidates:
            waiting[t.pod_set].append(t)
    unsatisfied = sum(1 for ps in pod_sets if active[ps.name] < ps.min_available)
    result: list[Task] = []
    for ps in pod_sets[: max(unsatisfied, 1)]:
        pending = sorted(waiting[ps.name], key=session.task_key)
        missing = ps.min_available - active[ps.name]
        result.extend(pending[: missing if missing > 0 else 1])
    return result


def tree_order(session, job: Job) -> dict[str, int]:
    """Rank of each pod set in allocation order: depth first through the subgroup tree, at each level
    the child subgroups (by name) before the pod sets (in pod-set order)."""
    ranks: dict[str, int] = {}
    pod_sets = ordered_pod_sets(session, job)

    def visit(parent):
        for name in sorted((n for n, sg in job.subgroups.items() if sg.parent == parent), key=str.encode):
            visit(name)
        for ps in pod_sets:
            if ps.parent == parent:
                ranks[ps.name] = len(ranks)

    visit(None)
    return ranks


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
