"""The job solver's scenario generators (KAI v0.17's ``NodeLocalGreedy`` and ``MultiNodeGang``).

A generator proposes victim sets for one probe (the first *k* tasks of the job's next step), best
first; it never simulates. Both accumulate the victim groups of the solve's victim stream one at a
time behind KAI's cheap filters (node affinities, idle GPUs), starting from the victims recorded
by the probe before:

* ``NodeLocalGreedy`` -- for every accumulated state, one scenario per node of the newest victim job
  (nodes by name): the recorded victims plus every accumulated group of the jobs with a task on
  that node; the recorded victims alone when nothing is accumulated yet.
* ``MultiNodeGang`` -- for every accumulated state, scenarios over growing prefixes of the nodes
  holding accumulated victims, smallest capacity first (idle + releasing GPUs plus what the victims
  there free). The first prefix is the shortest whose capacity, with the other feasible nodes,
  covers the probe's GPUs; it grows by 1, 2, 4, ... nodes up to all of them. Picking a node takes
  every group with a task there, whole, so a victim gang spread over nodes is evicted together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import attrs

from kai.actions.victims import IdleGpus, NodeAffinities, VictimStream
from kai.api import Job, Task
from kai.framework.scenariosearch import MULTI_NODE_GANG, NODE_LOCAL_GREEDY

if TYPE_CHECKING:
    from kai.framework.session import Session


@attrs.define(eq=False)
class Candidate:
    """A scenario to simulate: the recorded victim groups and the groups it adds."""

    recorded: list[Job]
    potential: list[Job]


@attrs.define(eq=False)
class SolveContext:
    """What a generator gets for one probe."""

    session: Session
    #: The probe's tasks: the first *k* tasks of the job's next step.
    pending: list[Task]
    #: The victim groups of the probe before that solved (empty for the first).
    recorded: list[Job]
    #: The feasible nodes of the job and the nodes of the recorded victims.
    nodes: set[str]
    victims: VictimStream
    #: Called when a filter rejects an accumulated state.
    filtered: Callable[[], None]
    #: Every node's idle + releasing GPUs before the probe (:func:`~kai.actions.victims.gpu_capacity`).
    capacity: dict[str, float]


Generator = Callable[[SolveContext], Iterator[Candidate]]


class _Accumulated(list[Job]):
    """The victim groups accumulated so far, in the order added."""

    def __init__(self) -> None:
        super().__init__()
        #: node -> the jobs with an accumulated task there; job uid -> the positions of its groups. They
        #: cover the first ``indexed`` groups and catch up when asked.
        self._jobs_on: dict[str, set[str]] = defaultdict(set)
        self._positions: dict[str, list[int]] = defaultdict(list)
        self._indexed = 0

    def of_jobs_on(self, node: str) -> list[Job]:
        """Every group of the jobs that have an accumulated task on ``node``, in the order added."""
        for i in range(self._indexed, len(self)):
            group = self[i]
            self._positions[group.uid].append(i)
            for t in group.tasks.values():
                if t.node:
                    self._jobs_on[t.node].add(group.uid)
        self._indexed = len(self)
        uids = self._jobs_on.get(node, ())
        return [self[i] for i in sorted(i for uid in uids for i in self._positions[uid])]


def _states(ctx: SolveContext, accumulated: _Accumulated) -> Iterator[None]:
    """Advance ``accumulated`` through the states the filters pass: the recorded victims alone, then
    one more victim group each time (KAI's accumulated scenario builder)."""
    affinities = NodeAffinities(ctx.session, ctx.pending, ctx.nodes)
    idle_gpus = IdleGpus(ctx.session, ctx.pending, ctx.capacity)
    recorded = [t for g in ctx.recorded for t in g.tasks.values()]
    if affinities.passes(recorded) & idle_gpus.passes(recorded):  # both filters count every victim
        yield
    else:
        ctx.filtered()
    add, filtered = accumulated.append, ctx.filtered
    affinities_pass, idle_gpus_pass = affinities.passes, idle_gpus.passes
    for group in ctx.victims.groups({t.uid for t in recorded}):
        add(group)
        tasks = group.tasks.values()
        passed = idle_gpus_pass(tasks)
        if affinities.unmatched:  # with every task matched the affinity filter has nothing left to learn
            passed = affinities_pass(tasks) & passed
        if passed:
            yield
        else:
            filtered()


def node_local_greedy(ctx: SolveContext) -> Iterator[Candidate]:
    session = ctx.session
    accumulated = _Accumulated()
    for _ in _states(ctx, accumulated):
        if not accumulated:
            if ctx.recorded:
                yield Candidate(ctx.recorded, [])
            continue
        latest = session.jobs[accumulated[-1].uid]
        # a task on a node that is gone is no victim: nothing to free there
        nodes = sorted({t.node for t in latest.tasks.values() if t.node and t.node in session.node_by_name})
        seen: set[frozenset[str]] = set()
        for node in nodes:
            groups = accumulated.of_jobs_on(node)
            key = frozenset(t.uid for g in groups for t in g.tasks.values())
            if groups and key not in seen:
                seen.add(key)
                yield Candidate(ctx.recorded, groups)


def multi_node_gang(ctx: SolveContext) -> Iterator[Candidate]:
    accumulated = _Accumulated()
    for _ in _states(ctx, accumulated):
        if not accumulated:
            yield Candidate(ctx.recorded, [])
            continue
        yield from _node_prefixes(ctx, list(accumulated))


def _free_gpus(session: Session, node: str) -> float:
    info = session.node_by_name.get(node)
    return info.idle_gpu_sum() + info.releasing_gpu_sum() if info is not None else 0.0


def _node_prefixes(ctx: SolveContext, groups: list[Job]) -> Iterator[Candidate]:
    """KAI's sub-scenario emitter over one accumulated state."""
    session = ctx.session
    requests = [t.request.quota_gpus() for t in ctx.pending]
    demand, smallest = sum(requests), min(requests)
    recorded_freed: dict[str, float] = defaultdict(float)
    for g in ctx.recorded:
        for t in g.tasks.values():
            if t.node:
                recorded_freed[t.node] += t.request.quota_gpus()
    node_groups: dict[str, list[int]] = {}
    first_seen: dict[str, int] = {}
    capacity: dict[str, float] = defaultdict(float)
    position = 0
    for i, g in enumerate(groups):
        for t in g.tasks.values():
            position += 1
            if not t.node:
                continue
            first_seen.setdefault(t.node, position)
            on_node = node_groups.setdefault(t.node, [])
            if not on_node or on_node[-1] != i:
                on_node.append(i)
            capacity[t.node] += t.request.quota_gpus()
    for node in node_groups:
        capacity[node] += recorded_freed[node] + _free_gpus(session, node)
    candidates = sorted((n for n in node_groups if smallest <= 0 or capacity[n] >= smallest),
                        key=lambda n: (capacity[n], first_seen[n]))
    baseline = sum(_free_gpus(session, n) + recorded_freed[n] for n in ctx.nodes if n not in node_groups)
    k = _shortest_covering([capacity[n] for n in candidates], demand - baseline)
    step = 1
    while k <= len(candidates):
        picked = sorted({i for n in candidates[:k] for i in node_groups[n]})
        yield Candidate(ctx.recorded, [groups[i] for i in picked])
        if k == len(candidates):
            return
        k, step = min(k + step, len(candidates)), step * 2


def _shortest_covering(capacities: list[float], demand: float) -> int:
    """The fewest leading ``capacities`` whose sum reaches ``demand`` (len + 1: none does)."""
    if demand <= 0:
        return 0
    total = 0.0
    for i, c in enumerate(capacities):
        total += c
        if total >= demand:
            return i + 1
    return len(capacities) + 1


#: KAI's default portfolio, in its plugin order: the narrow generator first.
PORTFOLIO: tuple[tuple[str, Generator], ...] = ((NODE_LOCAL_GREEDY, node_local_greedy),
                                                (MULTI_NODE_GANG, multi_node_gang))
