"""What the job solver's scenario generators draw on: the victim groups of a solve in victim order
(:class:`VictimStream`) and KAI's cheap pre-checks of a scenario before it is simulated (its
accumulated scenario filters: :class:`NodeAffinities`, :class:`IdleGpus`), and :class:`GpuRoom`, the
check of each scenario that its victims free enough GPUs for the step at all.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import attrs

from kai.api import Job, Task
from kai.framework.gang import tasks_to_evict
from kai.framework.jobqueue import JobQueue

if TYPE_CHECKING:
    from kai.framework.session import Session


def job_view(job: Job, tasks: Iterable[Task]) -> Job:
    """A stand-in for ``job`` holding only ``tasks`` (a victim group, or what is left of a victim job)."""
    return attrs.evolve(job, tasks={t.name: t for t in tasks})


def _gpus(task: Task) -> float:
    """The GPUs KAI's idle-GPU filter counts for a task: whole devices and fractions (not MIG, not memory)."""
    r = task.request
    return r.gpus + r.gpu_fraction * r.gpu_devices


def gpu_capacity(session: Session) -> dict[str, float]:
    """Every node's idle + releasing GPUs, by name (KAI's sums: whole devices, MIG slices, shared portions)."""
    return {n.name: n.idle_gpu_sum() + n.releasing_gpu_sum() for n in session.nodes}


class IdleGpus:
    """KAI's cheap pre-check of a scenario: the step's GPU requests (largest first) must fit greedily into
    the nodes with the most idle + releasing GPUs, counting the GPUs the scenario's victims free.

    ``capacity`` is :func:`gpu_capacity` of the session when known (it is copied, not changed)."""

    def __init__(self, session: Session, pending: list[Task], capacity: dict[str, float] | None = None) -> None:
        self.required = sorted((_gpus(t) for t in pending), reverse=True)
        self.capacity = dict(capacity) if capacity is not None else gpu_capacity(session)
        self.size = len(self.required)
        #: With equal requests (the usual gang): the step passes when the ``size`` nodes with the most GPUs
        #: hold ``size`` of them; ``holding`` counts the nodes by how many they hold, ``held`` is that sum.
        self.unit = self.required[0] if self.required and self.required[0] == self.required[-1] > 0 else None
        if self.unit:
            unit = self.unit
            self.holding = Counter([int(c // unit) for c in self.capacity.values()])
            self.held = self._top_held()
            return
        #: Otherwise the ``size`` nodes with the most GPUs, as (-GPUs, name), best first.
        self.top = sorted((-c, name) for c, name in heapq.nlargest(self.size, ((c, n) for n, c in
                                                                                 self.capacity.items())))
        self.in_top = {name for _, name in self.top}

    def _top_held(self) -> int:
        """How many requests the ``size`` nodes holding most hold (the nodes with the most GPUs)."""
        left, held = self.size, 0
        for holds in sorted(self.holding, reverse=True):
            n = min(left, self.holding[holds])
            held, left = held + n * holds, left - n
            if not left:
                break
        return held

    def _raise(self, node: str, gpus: float) -> None:
        old = self.capacity.get(node, 0.0)
        self.capacity[node] = new = old + gpus
        top = self.top
        if node in self.in_top:
            del top[bisect.bisect_left(top, (-old, node))]
        elif len(top) >= self.size and (not top or -new >= top[-1][0]):
            return
        bisect.insort(top, (-new, node))
        self.in_top.add(node)
        for _, name in top[self.size:]:
            self.in_top.discard(name)
        del top[self.size:]

    def passes(self, victims: Iterable[Task]) -> bool:
        """Count the GPUs ``victims`` free and check the step against the best nodes. Each victim is given
        once (one counted twice would only let a scenario through to the simulation)."""
        if self.unit:
            unit, capacity, holding = self.unit, self.capacity, self.holding
            for t in victims:  # _gpus and the held count, inline on this hot path
                r, node = t.request, t.node
                gpus = r.gpus + r.gpu_fraction * r.gpu_devices
                if not gpus or not node:
                    continue
                old = capacity.get(node)
                capacity[node] = new = (old or 0.0) + gpus
                holds = int(new // unit)
                if old is not None:
                    before = int(old // unit)
                    if before == holds:
                        continue
                    holding[before] -= 1
                    if not holding[before]:
                        del holding[before]
                holding[holds] += 1
                self.held = self._top_held()
            return self.held >= self.size
        for t in victims:
            gpus = _gpus(t)
            if gpus and t.node:
                self._raise(t.node, gpus)
        if not self.required or self.required[0] == 0:
            return True
        taken = [0.0] * len(self.top)
        for need in self.required:
            if need == 0:
                return True
            for k, (neg, _) in enumerate(self.top):
                if -neg < need:
                    return False
                if -neg - taken[k] >= need:
                    taken[k] += need
                    break
            else:
                return False
        return True


class GpuRoom:
    """A necessary condition for a scenario to place the step, checked before it is simulated.

    A node can give the step no more GPUs than its idle + releasing ones plus what the scenario's
    victims there free; so the step's GPUs must fit the total of the nodes with the most of them (as
    many nodes as tasks), and the *m* tasks asking at least *v* GPUs each need, for every such *v*, *m*
    slots of *v* GPUs among the *m* nodes with the most of them. Unlike :class:`IdleGpus`'s greedy
    fit this never turns away a scenario that could solve the step; victims whose GPUs it does not
    count (MIG slices, GPU memory) let every scenario through. The recorded victims, common to the
    probe's scenarios, are counted once. ``capacity`` is as for :class:`IdleGpus`.
    """

    def __init__(self, session: Session, pending: list[Task], recorded: Iterable[Task],
                 capacity: dict[str, float] | None = None) -> None:
        required = sorted((g for t in pending if (g := _gpus(t)) > 0), reverse=True)
        self.total = sum(required)
        #: (v, m): the m tasks asking v GPUs or more, one entry per distinct v.
        self.demands = [(v, i + 1) for i, v in enumerate(required) if i + 1 == len(required) or required[i + 1] != v]
        self.capacity: dict[str, float] = {}
        #: The nodes by GPUs, most first.
        self.ranked: list[tuple[float, str]] = []
        if self.demands:
            self.capacity = dict(capacity) if capacity is not None else gpu_capacity(session)
            if not self._free(self.capacity, recorded):
                self.demands = []  # GPUs it cannot count: every scenario may place the step
            self.ranked = sorted(((c, n) for n, c in self.capacity.items()), reverse=True)

    @staticmethod
    def _free(capacity: dict[str, float], victims: Iterable[Task]) -> bool:
        """Add the GPUs ``victims`` free to ``capacity``; False when some victim's GPUs cannot be counted."""
        for t in victims:
            r = t.request
            if r.mig or r.gpu_memory_mib:
                return False
            if t.node and (g := _gpus(t)):
                capacity[t.node] = capacity.get(t.node, 0.0) + g
        return True

    def may_place(self, victims: Iterable[Task]) -> bool:
        """Whether the step could fit once ``victims`` are evicted too (False only when it certainly cannot)."""
        if not self.demands:
            return True
        freed: dict[str, float] = {}
        if not self._free(freed, victims):
            return True
        size = self.demands[-1][1]
        best = [c for c, n in self.ranked[:size + len(freed)] if n not in freed]
        best += (self.capacity.get(n, 0.0) + g for n, g in freed.items())
        best = heapq.nlargest(size, best)
        eps = 1e-9
        return sum(best) + eps >= self.total and all(sum(int((c + eps) // v) for c in best[:m]) >= m
                                                     for v, m in self.demands)


def _matches(task: Task, labels: dict[str, str]) -> bool:
    """The task's node selector and required node affinity accept a node with ``labels``."""
    if any(labels.get(k) != v for k, v in task.node_selector.items()):
        return False
    return not task.node_affinity or any(all(r.matches(labels) for r in term) for term in task.node_affinity)


class NodeAffinities:
    """KAI's other cheap pre-check: every task of the step with a node selector or a required node
    affinity must match some node among the feasible nodes and the nodes of the scenario's victims."""

    def __init__(self, session: Session, pending: list[Task], nodes: set[str]) -> None:
        self.session = session
        self.nodes = set(nodes)
        self.unmatched = [t for t in pending if (t.node_selector or t.node_affinity)
                          and not any(_matches(t, session.node_by_name[n].labels)
                                      for n in self.nodes if n in session.node_by_name)]

    def passes(self, victims: Iterable[Task]) -> bool:
        if not self.unmatched:
            return True
        for t in victims:
            if self.unmatched and t.node and t.node in self.session.node_by_name and t.node not in self.nodes:
                self.nodes.add(t.node)
                labels = self.session.node_by_name[t.node].labels
                self.unmatched = [u for u in self.unmatched if not _matches(u, labels)]
        return not self.unmatched


class VictimStream:
    """The victim groups of one solve in victim order, for each partial step.

    Every partial step pops a fresh victim queue; a popped job overlapping the recorded victims is
    skipped (what is left of it goes back). While every popped job is taken whole (no elastic shrink,
    nothing left), skipping and taking change the queue alike, so the groups popped once are replayed
    for the next partial steps instead of popping again. The first job that is not taken whole ends
    the replay for the rest of the solve.
    """

    def __init__(self, session: Session, queue: JobQueue) -> None:
        self.session = session
        self.initial = queue
        self.live = queue.copy()
        #: The whole jobs popped so far, each with its task uids.
        self.popped: list[tuple[Job, tuple[str, ...]]] = []
        self.replayable = True

    def groups(self, recorded_uids: set[str]) -> Iterator[Job]:
        if not self.replayable:
            yield from self._pop_all(self.initial.copy(), recorded_uids)
            return
        if recorded_uids:
            yield from [group for group, uids in self.popped if recorded_uids.isdisjoint(uids)]
        else:
            yield from [group for group, _ in self.popped]
        while (view := self.live.pop()) is not None:
            tasks, more = tasks_to_evict(self.session, view)
            if not more and tasks and len(tasks) == len(view.tasks):
                uids = tuple(t.uid for t in view.tasks.values())
                self.popped.append((view, uids))
                if recorded_uids.isdisjoint(uids):
                    yield view
                continue
            self.replayable = False
            taken = self._take(self.live, view, tasks, more, recorded_uids)
            if taken is not None:
                yield taken
            yield from self._pop_all(self.live, recorded_uids)
            return

    def _pop_all(self, queue: JobQueue, recorded_uids: set[str]) -> Iterator[Job]:
        while (view := queue.pop()) is not None:
            group = self._take(queue, view, *tasks_to_evict(self.session, view), recorded_uids)
            if group is not None:
                yield group

    @staticmethod
    def _take(queue: JobQueue, view: Job, tasks: list[Task], more: bool, recorded_uids: set[str]) -> Job | None:
        """The victim group of a popped job (None when it overlaps the recorded victims or has nothing to
        evict); what is left of the job goes back into the queue."""
        if any(t.uid in recorded_uids for t in tasks):
            rest = [t for t in view.tasks.values() if t.uid not in recorded_uids]
            if rest:
                queue.push(job_view(view, rest))
            return None
        if more:
            taken = {t.uid for t in tasks}
            queue.push(job_view(view, [t for t in view.tasks.values() if t.uid not in taken]))
        if not tasks:
            return None
        return view if len(tasks) == len(view.tasks) else job_view(view, tasks)
