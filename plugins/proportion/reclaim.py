"""KAI's reclaim rules: who may reclaim, and which reclaim scenarios are fair.

A job may reclaim when its queue stays within its fair share with the job's next step, and -- for a
non-preemptible job -- every queue on its path stays within its deserved quota with the job's
non-preemptible allocation.

A scenario is judged against the queues as they were when the solver started on the job. Victim
resources come in chunks per victim job: each task beyond its pod set's gang size alone, the gang
tasks together; with ``allow_consolidating_reclaim`` tasks that were placed again do not count.
For each victim queue, the two queues where the reclaimer's and the victim's paths part (siblings)
are compared; before each chunk is taken from the victim side one strategy must hold:

* maintain fair share: the victim side is still above its allocatable share in some resource;
* guarantee deserved quota: the reclaimer side stays within its deserved quota with the job, and
  the victim side is still above its deserved quota in some resource.

With GPU quota per resource type (:mod:`.gputypes`), a reclaimer's queue must also stay within its fair
share of some type it may use, and the strategies hold per type for the GPUs taken on each type's nodes.

Afterwards, at every level of the reclaimer's path, the reclaimer's side must stay less saturated
(allocated / fair share, times the saturation multiplier) than each sibling it took from, in every
resource involved.
"""

from __future__ import annotations

import math

from kai.sdk import ACTIVE_ALLOCATED, UNLIMITED, Reject

from . import gputypes
from .shares import leq, memory_base, quantify

RESOURCES = range(3)


def _within(amounts, bounds) -> bool:
    return all(leq(a, b) for a, b in zip(amounts, bounds))


def _plus(a, b) -> list[float]:
    return [x + y for x, y in zip(a, b)]


def can_reclaim(plugin, session, job) -> Reject | None:
    request = plugin.job_request(session, job)
    leaf = plugin.shares.get(job.queue)
    if leaf is None:
        return None
    if not _within(_plus(leaf.allocated, request), leaf.fair_share):
        return Reject("proportion", f"queue {leaf.name} would go over its fair share")
    core = plugin.core_request(session, job)
    if core is not None:
        for q in session.ancestors(job.queue):
            qs = plugin.shares[q.name]
            if not _within(_plus(qs.allocated_np, core), qs.deserved):
                return Reject("proportion", f"non-preemptible job would take queue {qs.name} over its deserved quota")
    return None if plugin.types is None else gputypes.can_reclaim(plugin, session, job)


def _chunks(plugin, session, job, tasks, ignore_moved: bool) -> list[list[float]]:
    """Victim resources of one job: each task beyond its pod set's gang size alone, then the rest together."""
    by_set: dict[str, list] = {}
    for t in tasks:
        by_set.setdefault(t.pod_set, []).append(t)
    core, elastic = [], []
    for name, members in by_set.items():
        n = job.pod_sets[name].min_available if name in job.pod_sets else len(members)
        core.extend(members[:n])
        elastic.extend(members[n:])
    chunks = [_amount(plugin, session, [t], ignore_moved) for t in elastic]
    chunks.append(_amount(plugin, session, core, ignore_moved))
    return [c for c in chunks if c is not None]


def _amount(plugin, session, tasks, ignore_moved: bool):
    counted = [t for t in tasks if not (ignore_moved and t.status in ACTIVE_ALLOCATED)]
    if not counted:
        return None
    total = [0.0, 0.0, 0.0]
    for t in counted:
        base = memory_base(session.node_by_name.get(t.node), plugin.gpu_memory)
        for r, v in enumerate(quantify(t.request, base)):
            total[r] += v
    return total


def _path(session, queue_name: str) -> list[str]:
    return [q.name for q in reversed(session.ancestors(queue_name))]


def _leveled(session, reclaimer_queue: str, victim_queue: str) -> tuple[str, str]:
    """The queues where the two root-to-leaf paths part (the last common pair if one path contains the other)."""
    mine, theirs = _path(session, reclaimer_queue), _path(session, victim_queue)
    pair = (mine[0], theirs[0])
    for a, b in zip(mine, theirs):
        pair = (a, b)
        if a != b:
            break
    return pair


def _saturation(allocated: float, fair_share: float) -> float:
    if fair_share == 0:
        return math.inf if allocated > 0 else 0.0
    if fair_share == UNLIMITED:
        return 0.0
    return allocated / fair_share


class ReclaimState:
    """The queue allocations and the reclaimer's request when the solver started on a job."""

    def __init__(self, plugin, session, job):
        self.allocated = {name: list(qs.allocated) for name, qs in plugin.shares.items()}
        self.allocated_np = {name: list(qs.allocated_np) for name, qs in plugin.shares.items()}
        self.request = list(plugin.job_request(session, job))
        #: The request's non-preemptible part (None: it has none).
        self.core = plugin.core_request(session, job)
        #: Each queue's allocation per GPU type (:mod:`.gputypes`), by (type, queue).
        self.typed = gputypes.allocations(plugin) if plugin.types is not None else {}


def validate(plugin, session, scenario, state: ReclaimState) -> Reject | None:
    job = scenario.preemptor
    shares = plugin.shares
    request = state.request
    ignore_moved = session.plugins.config.allow_consolidating_reclaim
    freed = {t.job for t in scenario.candidates if t.status not in ACTIVE_ALLOCATED} if ignore_moved else None
    per_job: dict[str, list] = {}
    for t in scenario.candidates:
        if freed is None or t.job in freed:
            per_job.setdefault(t.job, []).append(t)
    per_queue: dict[str, list[list[float]]] = {}
    for uid, tasks in per_job.items():
        victim = session.jobs[uid]
        per_queue.setdefault(victim.queue, []).extend(_chunks(plugin, session, victim, tasks, ignore_moved))
    remaining: dict[str, list[float]] = {}
    involved: dict[str, set[int]] = {}
    for victim_queue, chunks in per_queue.items():
        if not chunks:
            continue
        mine, theirs = _leveled(session, job.queue, victim_queue)
        involved.setdefault(victim_queue, set()).update(r for c in chunks for r in RESOURCES if c[r] > 0)
        left = remaining.setdefault(theirs, list(state.allocated[theirs]))
        for chunk in chunks:
            if not _fits_strategy(shares[mine], state.allocated[mine], request, shares[theirs], left):
                return Reject("proportion", f"queue {theirs} is not above what the reclaim strategies protect")
            for q in session.ancestors(victim_queue):
                amounts = remaining.setdefault(q.name, list(state.allocated[q.name]))
                for r in RESOURCES:
                    amounts[r] -= chunk[r]
                if q.name != victim_queue:
                    involved.setdefault(q.name, set()).update(involved[victim_queue])
    if plugin.types is not None:
        reject = gputypes.validate(plugin, session, job, per_job, state.typed, _leveled)
        if reject is not None:
            return reject
    return _saturation_kept(plugin, session, job, request, remaining, involved, state)


def _fits_strategy(mine, mine_allocated, request, theirs, left) -> bool:
    above_allocatable = not _within(left, [theirs.allocatable(r) for r in RESOURCES])
    if above_allocatable:
        return True
    return _within(_plus(mine_allocated, request), mine.deserved) and not _within(left, theirs.deserved)


def _saturation_kept(plugin, session, job, request, remaining, involved, state) -> Reject | None:
    shares = plugin.shares
    asked = {r for r in RESOURCES if request[r] > 0}
    for q in session.ancestors(job.queue):
        mine = shares[q.name]
        amounts = _plus(remaining.get(q.name, state.allocated[q.name]), request)
        for sibling_name, left in remaining.items():
            sibling = shares[sibling_name]
            if sibling.parent != mine.parent or sibling_name == q.name:
                continue
            for r in involved.get(sibling_name, set()) | asked:
                if mine.fair_share[r] == UNLIMITED and sibling.fair_share[r] == UNLIMITED:
                    continue
                ratio = _saturation(amounts[r], mine.fair_share[r])
                if ratio > 1 and sibling.fair_share[r] > 0 and \
                        ratio * plugin.saturation_multiplier >= _saturation(left[r], sibling.fair_share[r]):
                    return Reject("proportion", f"queue {q.name} would be more saturated than queue {sibling_name}")
        if state.core is not None and not _within(_plus(state.allocated_np[q.name], state.core), mine.deserved):
            return Reject("proportion", f"non-preemptible job would take queue {q.name} over its deserved quota")
    return None
