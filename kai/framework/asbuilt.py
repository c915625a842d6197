"""Which jobs had a property as their snapshot built them, so that a pass over every job can look at fewer.

A session changes only the jobs it journals (:mod:`kai.framework.journal`); every other job of the snapshot
is as it was built. So a property of a job as built (stale, has pending tasks, ...) is worked out once per
snapshot and kept in its memo, and a snapshot that follows another (:meth:`~kai.framework.Snapshot.follow`)
takes it over for each job that is the very object of the one before. A pass then looks at the jobs the
session changed (:func:`changed_jobs`) and those flagged as built (:func:`flagged_as_built`), in the
snapshot's order, and skips the rest. A value worked out from the nodes as built (:func:`nodes_as_built`)
is kept likewise, while the snapshots' ``Node`` objects are the very same. Each is kept in the snapshot's memo
under a typed key (:class:`~kai.framework.memo.MemoKey`; :class:`JobsKey` for a property of each job).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar, cast

from kai.api import Job, Node, TaskStatus
from kai.framework.memo import MemoKey

if TYPE_CHECKING:
    from kai.framework.session import Session

T = TypeVar("T")


class _Flags:
    """A property of each job as built: job uid -> (the job, the value); the uids where it holds; the uids of
    jobs a session had changed when it was worked out, still to be looked at."""

    __slots__ = ("entries", "flagged", "unknown")

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Job, bool]] = {}
        self.flagged: set[str] = set()
        self.unknown: set[str] = set()


class JobsKey(MemoKey[_Flags]):
    """The memo key of a property of each job as built (:func:`flagged_as_built`, :func:`jobs_where`): one test
    per key."""

    __slots__ = ()


def changed_jobs(session: Session) -> set[str]:
    """Uids of the jobs the session changed so far: a task of theirs moved, a time of theirs set, or arrived."""
    journal = session.journal
    touched = {task.job for task, _ in journal.tasks.values()}
    touched.update(job.uid for job, _ in journal.jobs.values())
    touched.update(journal.added_jobs)
    return touched


def flagged_as_built(session: Session, key: JobsKey, test: Callable[[Job], bool], touched: set[str]) -> set[str]:
    """Uids of the snapshot's jobs not in ``touched`` (:func:`changed_jobs`) for which ``test`` held as the
    snapshot built them; ``key`` names the property in the memo (one ``test`` per key). Not to be changed."""
    snapshot = session.snapshot
    memo = snapshot.memo.get(key)
    if memo is None:
        before = snapshot.memo_before.pop(key)  # handed over: the snapshot before works it out again if need be
        earlier: dict[str, tuple[Job, bool]] = before.entries if before is not None else {}
        todo: Iterable[str] = snapshot.jobs
        if before is not None and snapshot.changed is not None:
            # only jobs new or built again, and those the session before changed, were not worked out there: the
            # flags of the snapshot before are taken over in place
            redo = snapshot.changed | before.unknown | snapshot.gone
            memo, memo.unknown = before, set()
            for uid in redo & memo.entries.keys():
                del memo.entries[uid]
            memo.flagged -= redo
            earlier, todo = {}, [uid for uid in redo if uid in snapshot.jobs]
        else:
            memo = _Flags()
        snapshot.memo[key] = memo
    else:
        earlier, todo, memo.unknown = {}, list(memo.unknown), set()
    jobs = snapshot.jobs
    for uid in todo:
        job = jobs.get(uid)
        if job is None:
            continue  # arrived in a session, gone since
        if uid in touched:
            memo.unknown.add(uid)
            continue
        kept = earlier.get(uid)
        entry = kept if kept is not None and kept[0] is job else (job, _holds(test, job))
        memo.entries[uid] = entry
        if entry[1]:
            memo.flagged.add(uid)
    return memo.flagged


def _holds(test: Callable[[Job], bool], job: Job) -> bool:
    """``test(job)``; True when it raises, so that the job's own step, where errors are contained per job, meets
    the error instead of the pass over every job."""
    try:
        return bool(test(job))
    except Exception:  # noqa: BLE001 - one bad job must not stop the pass for the others
        return True


def jobs_where(session: Session, key: JobsKey, test: Callable[[Job], bool]) -> set[str]:
    """Uids of the snapshot's jobs for which ``test`` holds, for a plugin opening a session (before the session
    changed any job): worked out as :func:`flagged_as_built` does, so mostly taken over from the snapshot before."""
    return flagged_as_built(session, key, test, set())


def nodes_as_built(session: Session, key: MemoKey[T], compute: Callable[[], T]) -> T:
    """``compute()``, a value worked out from the snapshot's nodes as built (their ``Node`` objects, which sessions
    do not change), once per snapshot and kept in its memo under ``key``; taken over from the snapshot before when
    its nodes are the very same objects in the same order (:func:`_same_nodes`). Not to be changed."""
    snapshot = session.snapshot
    memo = snapshot.memo
    if key not in memo:  # a value of None is kept too
        before = snapshot.memo_before
        memo[key] = cast(T, before.get(key)) if _same_nodes(session) and key in before else compute()
    return cast(T, memo.get(key))


class _Nodes:
    """A snapshot's nodes, and whether they are those of the snapshot before."""

    __slots__ = ("nodes", "same")

    def __init__(self, nodes: list[Node], same: bool) -> None:
        self.nodes, self.same = nodes, same


#: The memo key of the snapshot's nodes (:func:`_same_nodes`).
NODES: MemoKey[_Nodes] = MemoKey("nodes")


def _same_nodes(session: Session) -> bool:
    """Whether the snapshot's nodes are the very ``Node`` objects of the snapshot before, in the same order: looked
    at once per snapshot, as a session finds them (after the driver has made them)."""
    snapshot = session.snapshot
    same = snapshot.memo.get(NODES)
    if same is None:
        before = snapshot.memo_before.get(NODES)
        nodes = snapshot.nodes
        same = snapshot.memo[NODES] = _Nodes(list(nodes), before is not None and len(before.nodes) == len(
            nodes) and all(map(operator.is_, before.nodes, nodes)))
    return same.same


def pending_jobs(session: Session) -> int:
    """How many of the session's jobs have pending tasks now."""
    touched = changed_jobs(session)
    jobs = session.jobs
    return len(pending_as_built(session, touched) - touched) + sum(
        1 for uid in touched if (job := jobs.get(uid)) is not None and job.has_pending())


def maybe_pending(session: Session) -> Iterator[Job]:
    """The session's jobs that may have pending tasks now, in its order: those it changed and those pending as
    built (a pass over pending work looks at these and skips the rest)."""
    touched = changed_jobs(session)
    return map(session.jobs.__getitem__, session.snapshot.in_order(touched | pending_as_built(session, touched)))


def pending_as_built(session: Session, touched: set[str]) -> set[str]:
    """Uids of the jobs not in ``touched`` (:func:`changed_jobs`) with pending tasks as built: with those in
    ``touched``, the jobs a pass over pending work looks at."""
    return flagged_as_built(session, PENDING, Job.has_pending, touched)


#: The memo key of the jobs with pending tasks as built (:func:`pending_as_built`).
PENDING = JobsKey("pending")


class _Statuses:
    """How many tasks of each job had each status as built (status, count pairs), and the sums over the jobs."""

    __slots__ = ("per_job", "total")

    def __init__(self, per_job: dict[str, tuple[tuple[TaskStatus, int], ...]], total: Counter[TaskStatus]) -> None:
        self.per_job, self.total = per_job, total


#: The memo key of the task statuses of each job as built (:func:`task_statuses`).
STATUSES: MemoKey[_Statuses] = MemoKey("task-statuses")


def task_statuses(session: Session) -> Counter[TaskStatus]:
    """How many tasks of the session's jobs have each status now: counted per job as built (taken over from the
    snapshot before for the jobs it had, the very objects), with what the session changed since."""
    snapshot, journal = session.snapshot, session.journal
    added = set(journal.added_jobs)
    memo = snapshot.memo.get(STATUSES)
    if memo is None:
        before = snapshot.memo_before.pop(STATUSES)  # handed over: brought up to date in place
        if before is not None and snapshot.changed is not None:
            memo = before
            redo = snapshot.changed | snapshot.gone
            for uid in redo & memo.per_job.keys():
                memo.total.subtract(dict(memo.per_job.pop(uid)))
        else:
            memo, redo = _Statuses({}, Counter()), set(snapshot.jobs)
        was = {id(task): fields[0] for task, fields in journal.tasks.values()}
        for uid in redo:
            job = snapshot.jobs.get(uid)
            if job is not None and uid not in added:
                counts = Counter(was.get(id(t), t.status) for t in job.tasks.values())
                memo.per_job[uid] = tuple(counts.items())
                memo.total.update(counts)
        snapshot.memo[STATUSES] = memo
    now = Counter(memo.total)
    for task, fields in journal.tasks.values():
        if task.job not in added:
            now[fields[0]] -= 1
            now[task.status] += 1
    for uid in added:
        if (job := session.jobs.get(uid)) is not None:  # not taken out again by a plugin's veto
            now.update(t.status for t in job.tasks.values())
    return +now
