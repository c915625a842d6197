"""The core of a semi-preemptible job: what of it counts as non-preemptible.

A semi-preemptible job (KAI's ``preemptibility: semi-preemptible``) is non-preemptible up to each pod set's
gang size and preemptible above it. Its core is counted by pod set: of the tasks placed in a pod set, as many
as its gang size count as non-preemptible (in-quota), the rest as preemptible (over-quota allowed). A task
placed while its pod set is below its gang size joins the core; one taken off while the pod set stays at or
below it leaves the core.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from kai.sdk import ACTIVE_ALLOCATED


class CoreCount:
    """Counts a job's placed tasks in the order given: :meth:`take` is whether the next one is in its core."""

    def __init__(self, job) -> None:
        self.job = job
        self.placed: Counter[str] = Counter()

    def take(self, task) -> bool:
        if not self.job.preemptible:
            return True
        if not self.job.semi_preemptible:
            return False
        ps = self.job.pod_sets.get(task.pod_set)
        self.placed[task.pod_set] += 1
        return ps is not None and self.placed[task.pod_set] <= ps.min_available


def charged_to_core(job, task, placed: bool) -> bool:
    """Whether ``task``, just placed (``placed``) or just taken off, moves the job's non-preemptible amount."""
    if not job.preemptible:
        return True
    if not job.semi_preemptible or task.pod_set not in job.pod_sets:
        return False
    active = job.count(task.pod_set, ACTIVE_ALLOCATED)
    minimum = job.pod_sets[task.pod_set].min_available
    return active <= minimum if placed else active < minimum


def core_tasks(job, tasks: Iterable) -> list:
    """The tasks of ``tasks`` (to be placed) that would join the job's core: all of a non-preemptible job,
    none of a preemptible one, and of a semi-preemptible one those filling each pod set up to its gang size."""
    if not job.preemptible:
        return list(tasks)
    if not job.semi_preemptible:
        return []
    room = {name: ps.min_available - job.count(name, ACTIVE_ALLOCATED) for name, ps in job.pod_sets.items()}
    out = []
    for t in tasks:
        if room.get(t.pod_set, 0) > 0:
            room[t.pod_set] -= 1
            out.append(t)
    return out
