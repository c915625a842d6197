"""Jobs ordered across the queue tree.

Leaf queues hold their jobs in job order; at every level of the tree the next job comes from the
child queue that the queue order prefers, each child represented by the best job of its subtree.
The queue order is asked afresh on every pop, since allocations change the queues' shares.
"""

from __future__ import annotations

import bisect

from kai.api import Job, Queue


class JobQueue:
    def __init__(self, session, jobs, reverse: bool = False):
        """``reverse`` gives victim order: the last job of the least deserving queue first."""
        self.session = session
        self.reverse = reverse
        self.leaves: dict[str, list] = {}
        for job in jobs:
            self._insert(job)

    def _key(self, job: Job):
        return self.session.job_key(job)

    def _insert(self, job: Job) -> None:
        entries = self.leaves.setdefault(job.queue, [])
        bisect.insort(entries, (self._key(job), job), key=lambda e: e[0])

    def push(self, job: Job) -> None:
        self._insert(job)

    def __bool__(self) -> bool:
        return any(self.leaves.values())

    def _best_job(self, queue: Queue) -> Job | None:
        """The job the subtree of ``queue`` would give next, and the child path leading to it."""
        entries = self.leaves.get(queue.name)
        if entries:
            return entries[-1][1] if self.reverse else entries[0][1]
        child = self._best_child(queue.name)
        return None if child is None else child[1]

    def _best_child(self, parent: str | None):
        best = None
        for q in self.session.children.get(parent, ()):
            job = self._best_job(q)
            if job is None:
                continue
            if best is None:
                best = (q, job)
                continue
            r = self.session.compare_queues(q, best[0], job, best[1])
            if (r > 0) if self.reverse else (r < 0):
                best = (q, job)
        return best

    def pop(self) -> Job | None:
        """Remove and return the next job, or None when no job is left."""
        parent = None
        while True:
            best = self._best_child(parent)
            if best is None:
                return None
            queue = best[0]
            entries = self.leaves.get(queue.name)
            if entries:
                return entries.pop()[1] if self.reverse else entries.pop(0)[1]
            parent = queue.name
