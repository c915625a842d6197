"""Counterfactuals: would a pending job run if one thing changed? Asked of the kernel itself.

Each :class:`~kai.framework.reasons.Suggestion` carries a ``change`` (JSON-ready): raise a queue's
limit or deserved quota (``{"queue", "resource", "limit" | "deserved"}``), end jobs (``{"end_jobs":
[namespace/name, ...]}``), add a node with more GPUs (``{"add_node_gpus": n}``), relax a topology
constraint to a preferred level (``{"relax_topology": true}``) or make the job preemptible
(``{"preemptible": true}``). :func:`keep_as_built` keeps a cycle's snapshot as it was built without
copying it -- its facts by reference, and the few fields a session changes as they were built -- and
:func:`copy_as_built` copies it from that, on any thread, while later sessions go on;
:func:`verify` applies a change to a copy of that, runs the configured actions in a new session and
answers whether every pending pod of the job was placed (bound or pipelined). Changes it cannot apply
answer None.
:func:`verify_all` stops starting new runs once its time is up and says so.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import attrs

from kai.api import Job, PodSet, SubGroup, TaskStatus
from kai.framework.journal import JOB_FIELDS, TASK_FIELDS
from kai.framework.plugins import Plugins
from kai.framework.session import Session
from kai.framework.snapshot import Snapshot

#: Seconds :func:`verify_all` may spend starting counterfactual runs.
DEFAULT_BUDGET = 10.0
#: The name of the node a counterfactual adds (a copy of the largest node the job's pods may select).
ADDED_NODE = "would-run-if-node"
HOSTNAME = "kubernetes.io/hostname"


@attrs.frozen(eq=False)
class AsBuilt:
    """A snapshot as it was built, kept without copying it: its facts by reference (a session changes none of them
    but the fields of :mod:`kai.framework.journal`), and those fields of each task and job as built, by object id
    (:data:`~kai.framework.journal.TASK_FIELDS`, :data:`~kai.framework.journal.JOB_FIELDS`). Later sessions
    may change the objects' fields; a copy (:func:`copy_as_built`) puts back the kept ones."""

    facts: dict[str, Any]
    tasks: dict[int, tuple[Any, ...]]
    jobs: dict[int, tuple[Any, ...]]


def keep_as_built(snapshot: Snapshot) -> AsBuilt:
    """``snapshot`` as built, kept while a session is still on it (or none is): the fields it changed are taken
    from its journal, the others as they are. Costs a tuple per task and job; no object is copied."""
    journal = snapshot.journal
    added = set(journal.added_jobs) if journal is not None else set()
    facts = {a.name: getattr(snapshot, a.name) for a in attrs.fields(Snapshot) if a.init}
    facts["jobs"] = {uid: job for uid, job in snapshot.jobs.items() if uid not in added}
    facts["problems"] = snapshot.problems[:journal.problems] if journal is not None else list(snapshot.problems)
    every = [*facts["jobs"].values(), *snapshot.rejected_jobs.values()]
    tasks = {id(t): tuple(getattr(t, f) for f in TASK_FIELDS) for job in every for t in job.tasks.values()}
    jobs = {id(j): tuple(getattr(j, f) for f in JOB_FIELDS) for j in every}
    if journal is not None:
        tasks.update((key, saved) for key, (_, saved) in journal.tasks.items())
        jobs.update((key, saved) for key, (_, saved) in journal.jobs.items())
    return AsBuilt(facts, tasks, jobs)


def copy_as_built(kept: AsBuilt) -> Snapshot:
    """A deep copy of the snapshot ``kept`` keeps, as it was built (whatever sessions changed on it since); nothing
    the sessions kept on the snapshot is copied. Runs on any thread: it reads no field a session changes."""
    memo: dict[int, Any] = {}
    base = Snapshot(**copy.deepcopy(kept.facts, memo))
    for fields, saved in ((TASK_FIELDS, kept.tasks), (JOB_FIELDS, kept.jobs)):
        for key, values in saved.items():
            copied = memo[key]  # each kept task and job is reached from the facts
            for field, value in zip(fields, values, strict=True):
                setattr(copied, field, value)
    return base


def verify(base: Snapshot, plugins: Plugins, job_uid: str, change: dict[str, Any],
           actions: Sequence[str] | None = None) -> bool | None:
    """Whether the job ``job_uid`` has all its pending pods placed once ``change`` is applied to a copy of
    ``base`` (a snapshot no session ran on) and ``actions`` (default: the configured ones) run; None when the
    change cannot be applied here."""
    snapshot = copy.deepcopy(base)
    job = snapshot.jobs.get(job_uid)
    if job is None or not _apply(snapshot, job, change):
        return None
    pending = {t.uid for t in job.tasks.values() if t.status is TaskStatus.PENDING}
    session = Session(snapshot, plugins).open()
    try:
        session.run_actions(actions)
        placed = {d.task.uid for d in session.decisions if d.kind in ("bind", "pipeline")}
    finally:
        session.close()
    return pending <= placed


def verify_all(base: Snapshot, plugins: Plugins, job_uid: str, changes: Sequence[dict[str, Any]],
               actions: Sequence[str] | None = None, budget: float = DEFAULT_BUDGET) -> list[bool | str | None]:
    """:func:`verify` of each change in turn; once ``budget`` seconds have passed, the rest answer
    ``"gave up: out of time"``."""
    deadline = time.monotonic() + budget
    out: list[bool | str | None] = []
    for change in changes:
        out.append(verify(base, plugins, job_uid, change, actions) if time.monotonic() < deadline
                   else "gave up: out of time")
    return out


def _apply(snapshot: Snapshot, job: Job, change: dict[str, Any]) -> bool:
    if "queue" in change:
        queue = snapshot.queues.get(change["queue"])
        if queue is None:
            return False
        field = "limit" if "limit" in change else "deserved"
        spec = getattr(queue, change["resource"])
        setattr(queue, change["resource"], attrs.evolve(spec, **{field: float(change[field])}))
        return True
    if "end_jobs" in change:
        ending = set(change["end_jobs"])
        gone = [uid for uid, j in snapshot.jobs.items() if f"{j.namespace}/{j.name}" in ending]
        for uid in gone:
            del snapshot.jobs[uid]
        return len(gone) == len(ending)
    if "add_node_gpus" in change:
        gpus = float(change["add_node_gpus"])
        selector = next((t.node_selector for t in job.tasks.values() if t.status is TaskStatus.PENDING), {})
        fitting = [n for n in snapshot.nodes if selector.items() <= n.labels.items()] or snapshot.nodes
        template = max(fitting, key=lambda n: n.allocatable.gpu, default=None)
        if template is None:
            return False
        capacity = None if template.capacity is None else attrs.evolve(template.capacity, gpu=gpus)
        labels = template.labels | {HOSTNAME: ADDED_NODE} if HOSTNAME in template.labels else template.labels
        snapshot.nodes.append(attrs.evolve(template, name=ADDED_NODE, labels=labels, capacity=capacity,
                                           allocatable=attrs.evolve(template.allocatable, gpu=gpus)))
        return True
    if change.get("relax_topology"):
        relaxed = False
        holders: list[Job | SubGroup | PodSet] = [job, *job.subgroups.values(), *job.pod_sets.values()]
        for holder in holders:
            c = holder.topology
            if c is not None and c.required_level:
                holder.topology = attrs.evolve(c, required_level=None,
                                               preferred_level=c.preferred_level or c.required_level)
                relaxed = True
        return relaxed
    if change.get("preemptible"):
        job.preemptible = True
        return True
    return False
