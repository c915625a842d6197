"""Jobs ordered across the queue tree.

Leaf queues hold their jobs in job order; at every level of the tree the next job comes from the
child queue that the queue order prefers, each child represented by the best job of its subtree.

Each queue with children keeps its children in a tournament (a binary tree of matches, each won by
the queue the order prefers), so the next queue is known without comparing every sibling. A queue is
compared again only when something the queue order may read about it changed (the hook's contract,
``kai_queue_order``): a job of its subtree was taken out or put back, a task of one of its jobs moved
(:attr:`Session.queue_moves <kai.framework.session.Session.queue_moves>`), or, for every queue, a job
arrived in the session or a plugin withdrew from the queue order. Then only the matches on its path
are played again: a pop costs about log2(siblings) comparisons per level instead of one per sibling.
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


class _Tournament:
    """The children of one queue (in the session's order) and the matches between them: ``won[k]`` is the
    position of the child that won match ``k`` (``-1``: no child with a job below it), the matches of
    node ``k`` being ``2k`` and ``2k + 1``, the children's slots starting at ``size``."""

    __slots__ = ("children", "entries", "size", "won")

    def __init__(self, children: list[Queue]) -> None:
        self.children = children
        self.entries: list[Best | None] = [None] * len(children)
        size = 1
        while size < len(children):
            size *= 2
        self.size = size
        self.won = [-1] * (2 * size)

    def copy(self) -> _Tournament:
        other = _Tournament.__new__(_Tournament)
        other.children, other.entries, other.size = self.children, list(self.entries), self.size
        other.won = list(self.won)
        return other


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
        #: One tournament per queue with children (None: the roots), built on the first pop.
        self._tournaments: dict[str | None, _Tournament] = {}
        #: Positions of the children to enter again, by parent; None: everything is built again.
        self._stale: dict[str | None, set[int]] | None = None
        #: What the tournaments were built on: the session's epoch, the queue-order calls, the moves seen.
        self._built_on: tuple[int, object] = (-1, None)
        self._moves_seen = 0

    def _key(self, job: Job) -> SupportsAllComparisons:
        return self.session.job_key(job)

    def _insert(self, job: Job) -> None:
        entries = self.leaves.setdefault(job.queue, [])
        bisect.insort(entries, (self._key(job), job), key=_first)
        if self.depth is not None and len(entries) > self.depth:
            entries.pop()
        self._changed(job.queue)

    def push(self, job: Job) -> None:
        self._insert(job)

    def copy(self) -> JobQueue:
        """An independent queue with the same jobs (and victims popped so far)."""
        other = JobQueue(self.session, (), self.reverse, depth=self.depth)
        other.leaves = {name: list(entries) for name, entries in self.leaves.items()}
        other.popped = {name: list(jobs) for name, jobs in self.popped.items()}
        other._tournaments = {name: t.copy() for name, t in self._tournaments.items()}
        other._stale = None if self._stale is None else {name: set(s) for name, s in self._stale.items()}
        other._built_on, other._moves_seen = self._built_on, self._moves_seen
        return other

    def __bool__(self) -> bool:
        return any(self.leaves.values())

    # --- the tournaments ----------------------------------------------------------------------------

    def _changed(self, leaf: str) -> None:
        """Enter ``leaf`` and its ancestors again before the next pop."""
        stale = self._stale
        if stale is None:
            return
        slots = self.session.sibling_slots
        for q in self.session.ancestors(leaf):
            stale.setdefault(q.parent, set()).add(slots[q.name])

    def _entry(self, q: Queue) -> Best | None:
        """What represents child ``q`` to the queue order: its own next job, else its subtree's."""
        entries = self.leaves.get(q.name)
        if entries:
            return q, entries[-1][1] if self.reverse else entries[0][1], q.name
        sub = self._winner(q.name)
        return None if sub is None else (q, sub[1], sub[2])

    def _winner(self, parent: str | None) -> Best | None:
        t = self._tournaments.get(parent)
        if t is None:
            return None
        won = t.won[1]  # the final match, or the only child's slot
        return None if won < 0 else t.entries[won]

    def _match(self, t: _Tournament, a: int, b: int) -> int:
        """The winner of children ``a`` < ``b`` (either may be -1: none); the later one is asked about first,
        as a scan of the children in order would."""
        if a < 0:
            return b
        if b < 0:
            return a
        ea, eb = t.entries[a], t.entries[b]
        assert ea is not None and eb is not None
        if self.reverse:
            r = self.session.compare_queues(eb[0], ea[0], None, None, self._victims(eb[2], eb[1]),
                                            self._victims(ea[2], ea[1]))
            return b if r > 0 else a
        return b if self.session.compare_queues(eb[0], ea[0], eb[1], ea[1]) < 0 else a

    def _build(self, parent: str | None) -> None:
        children = self.session.children.get(parent, [])
        t = self._tournaments[parent] = _Tournament(children)
        for i, q in enumerate(children):
            if q.name in self.session.children:
                self._build(q.name)
            entry = t.entries[i] = self._entry(q)
            t.won[t.size + i] = -1 if entry is None else i
        for k in range(t.size - 1, 0, -1):
            t.won[k] = self._match(t, t.won[2 * k], t.won[2 * k + 1])

    def _update(self, parent: str | None) -> None:
        assert self._stale is not None
        positions = self._stale.pop(parent, None)
        if not positions:
            return
        t = self._tournaments[parent]
        for i in sorted(positions):
            q = t.children[i]
            if q.name in self.session.children:
                self._update(q.name)
            entry = t.entries[i] = self._entry(q)
            k = t.size + i
            t.won[k] = -1 if entry is None else i
            k //= 2
            while k:
                t.won[k] = self._match(t, t.won[2 * k], t.won[2 * k + 1])
                k //= 2

    def _refresh(self) -> None:
        """Bring the tournaments up to date: built again after an arrival or a withdrawal from the queue
        order, else the queues with a moved task or a changed job entered again."""
        session = self.session
        built_on = (session.order_epoch, session.calls.kai_queue_order)
        moves = session.queue_moves
        if self._stale is None or built_on[0] != self._built_on[0] or built_on[1] is not self._built_on[1]:
            self._stale = {}
            self._build(None)
            self._built_on, self._moves_seen = built_on, len(moves)
            return
        if self._moves_seen < len(moves):
            for leaf in set(moves[self._moves_seen:]):
                self._changed(leaf)
            self._moves_seen = len(moves)
        if self._stale:
            self._update(None)

    def _victims(self, leaf: str, job: Job) -> list[Job]:
        return self.popped.get(leaf, []) + [job]

    def pop(self) -> Job | None:
        """Remove and return the next job, or None when no job is left."""
        self._refresh()
        best = self._winner(None)
        if best is None:
            return None
        leaf = best[2]
        entries = self.leaves[leaf]
        self._changed(leaf)
        if not self.reverse:
            return entries.pop(0)[1]
        job = entries.pop()[1]
        self.popped.setdefault(leaf, []).append(job)
        return job
