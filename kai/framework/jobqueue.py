"""Jobs ordered across the queue tree.

Leaf queues hold their jobs in job order; at every level of the tree the next job comes from the
child queue that the queue order prefers, each child represented by the best job of its subtree.
The queue order is asked afresh on every pop, since allocations change the queues' shares.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kai.api import Job, Queue

if TYPE_CHECKING:
    from _typeshed import SupportsAllComparisons

    from kai.framework.session import Session

    #: A job with its sort key (``Session.job_key``).
    Entry = tuple[SupportsAllComparisons, Job]
    #: The next job under a queue: (child queue, job, name of the job's leaf queue).
    Best = tuple[Queue, Job, str]


def _first(entry: Entry) -> SupportsAllComparisons:
    return entry[0]


class JobQueue:
    def __init__(self, session: Session, jobs: Iterable[Job], reverse: bool = False, presorted: bool = False,
                 depth: int | None = None) -> None:
        """``reverse`` gives victim order: the last job of the least deserving queue first.

        In victim order each queue is represented to the queue order by its victims: the jobs already
        popped from it and its next one. ``presorted`` jobs are already in job order. ``depth`` keeps
        only the first ``depth`` jobs of each leaf queue, also after a push (``queueDepthPerAction``:
        KAI drops whichever job sits at that position of its heap; here it is the last in job order).
        """
        self.session = session
        self.reverse = reverse
        self.depth = depth
        self.leaves: dict[str, list[Entry]] = {}
        self.popped: dict[str, list[Job]] = {}
        by_leaf: dict[str, list[Job]] = {}
        for job in jobs:
            by_leaf.setdefault(job.queue, []).append(job)
        for leaf, members in by_leaf.items():
            entries = [(self._key(j), j) for j in members]
            self.leaves[leaf] = (entries if presorted else sorted(entries, key=_first))[:depth]

    def _key(self, job: Job) -> SupportsAllComparisons:
        return self.session.job_key(job)

    def _insert(self, job: Job) -> None:
        entries = self.leaves.setdefault(job.queue, [])
        bisect.insort(entries, (self._key(job), job), key=_first)
        if self.depth is not None and len(entries) > self.depth:
            entries.pop()

    def push(self, job: Job) -> None:
        self._insert(job)

    def copy(self) -> JobQueue:
        """An independent queue with the same jobs (and victims popped so far)."""
        other = JobQueue(self.session, (), self.reverse, depth=self.depth)
        other.leaves = {name: list(entries) for name, entries in self.leaves.items()}
        other.popped = {name: list(jobs) for name, jobs in self.popped.items()}
        return other

    def __bool__(self) -> bool:
        return any(self.leaves.values())

    def _best(self, parent: str | None) -> Best | None:
        """The child queue of ``parent`` that goes next, with its job and its leaf queue, or None."""
        best: Best | None = None
        session, leaves, reverse = self.session, self.leaves, self.reverse
        for q in session.children.get(parent, ()):
            entries = leaves.get(q.name)
            if entries:
                job, leaf = entries[-1][1] if reverse else entries[0][1], q.name
            else:
                sub = self._best(q.name)
                if sub is None:
                    continue
                job, leaf = sub[1], sub[2]
            if best is None:
                best = (q, job, leaf)
                continue
            if reverse:
                r = session.compare_queues(q, best[0], None, None, self._victims(leaf, job),
                                           self._victims(best[2], best[1]))
                if r > 0:
                    best = (q, job, leaf)
            elif session.compare_queues(q, best[0], job, best[1]) < 0:
                best = (q, job, leaf)
        return best

    def _victims(self, leaf: str, job: Job) -> list[Job]:
        return self.popped.get(leaf, []) + [job]

    def pop(self) -> Job | None:
        """Remove and return the next job, or None when no job is left."""
        best = self._best(None)
        if best is None:
            return None
        leaf = best[2]
        entries = self.leaves[leaf]
        if not self.reverse:
            return entries.pop(0)[1]
        job = entries.pop()[1]
        self.popped.setdefault(leaf, []).append(job)
        return job
