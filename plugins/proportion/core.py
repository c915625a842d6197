"""The core of a semi-preemptible job: what of it counts as non-preemptible.

A semi-preemptible job (KAI's ``preemptibility: semi-preemptible``) is non-preemptible up to its minimal
satisfying set -- its core (:func:`kai.sdk.core_tasks`: the minimum of every pod set and of every node of
its subgroup tree) -- and preemptible above it. The core counts as the queue's non-preemptible allocation
(in-quota), the rest as preemptible (over-quota allowed). A non-preemptible job is all core, a preemptible
one has none.
"""

from __future__ import annotations

from collections.abc import Iterable

from kai.sdk import ACTIVE_ALLOCATED, ALLOCATED, core_tasks


def core_of(job) -> set[str] | None:
    """The uids of the job's allocated tasks that are in its core; None: all of them (non-preemptible)."""
    if not job.preemptible:
        return None
    if not job.semi_preemptible:
        return set()
    return core_tasks(job, {t.uid for t in job.tasks.values() if t.status in ALLOCATED})


def joining_core(job, tasks: Iterable) -> list:
    """The tasks of ``tasks`` (to be placed) that would join the job's core."""
    tasks = list(tasks)
    if not job.preemptible:
        return tasks
    if not job.semi_preemptible:
        return []
    placed = {t.uid for t in job.tasks.values() if t.status in ACTIVE_ALLOCATED}
    core = core_tasks(job, placed | {t.uid for t in tasks})
    return [t for t in tasks if t.uid in core]
