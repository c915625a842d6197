"""``kai-scheduler replay --mode timed``: a trace replayed on its own clock, through every configured action.

Each pod arrives at its ``creation_time`` and, once placed, runs for ``deletion_time - creation_time``
seconds (a pod without a deletion time runs until the last time the trace names), so queueing delays shift
completions. Scheduling cycles run on a grid of ``period`` seconds of trace time through
:func:`kai.sim.simulate.run_cycles` -- a snapshot of the cluster per cycle, one Session, the configured
actions -- and a pod that does not fit waits in its queue for the next cycle. A cycle runs only when a pod
is pending or a job has run for its declared maximum runtime, and after a cycle that changed nothing the next
one waits for the next arrival, completion or runtime limit: the same facts would give the same decisions. An
evicted pod goes back to pending and, placed again, runs its whole run time again; a gang (a row with
``replicas``) runs as one, and loses all its pods when one is evicted. A job evicted at its declared maximum
runtime (the ``runtimelimit`` action) is stopped, not queued again. ``speedup`` brings the arrivals closer
together (their times from the first divided by it) and keeps every run time, to load a cluster the trace
leaves idle. See ``docs/replay.md``.
"""

from __future__ import annotations

import heapq
import math
import time

import attrs

from kai.api import Job, Queue, QuotaSpec, Task, TaskStatus
from kai.common.errors import ConfigError
from kai.framework import SchedulerConfig, Session, build_snapshot
from kai.sim.replay.progress import progress_bar
from kai.sim.replay.queues import read_queue_file
from kai.sim.replay.trace import TracePod, arrival_job, read_nodes, read_pods, seeded_names
from kai.sim.rounds import feed_back_jobs
from kai.sim.simulate import Run, prepare, run_cycles

#: The percentiles of the queueing delay and JCT summaries.
PERCENTILES = (50, 90, 99)


@attrs.define(eq=False)
class Pod:
    """A trace pod during the replay: its job, and when it was placed and will finish."""

    trace: TracePod
    run_s: float
    job: Job
    first_placed: float | None = None
    finish: float | None = None
    done: float | None = None

    @property
    def tasks(self) -> list[Task]:
        return list(self.job.tasks.values())

    @property
    def pending(self) -> bool:
        return self.job.has_pending()

    @property
    def node(self) -> str | None:
        return next(iter(self.job.tasks.values())).node


@attrs.define
class Timeline:
    """What a timed replay records: one row per event and one per cycle."""

    #: (time, event, pod, queue, node, pod's milli-GPU, allocated milli-GPU after it).
    events: list[tuple] = attrs.field(factory=list)
    #: (time, allocated milli-GPU, pending pods, running pods, {queue: (allocated GPUs, fair share GPUs)}).
    cycles: list[tuple] = attrs.field(factory=list)


def trace_queues(pods: list[TracePod], queues_file: str | None, pods_file: str, column: str | None) -> list[Queue]:
    """The queues of a timed replay, each pod's ``queue`` set to its queue's name: from ``queues_file``, whose
    leaf queues the column's values (or ``default``) must name, else one queue per value with no quota."""
    if queues_file is None:
        return [Queue(q, None, 100, QuotaSpec(0.0, -1.0, 1.0)) for q in dict.fromkeys(p.queue for p in pods)]
    qf = read_queue_file(queues_file)
    leaves = qf.leaves()
    for i, p in enumerate(pods):
        name = qf.queue_of(p.queue)
        if name not in leaves:
            field = f"field {column}" if column else "no --queue-column, so queue"
            raise ConfigError(f"{pods_file}: pod {p.name}: {field} {p.queue!r} names no leaf queue of {queues_file}")
        pods[i] = attrs.evolve(p, queue=name)
    return qf.queues


def percentiles(values: list[float]) -> dict[str, float | None]:
    """``p50``, ``p90``, ``p99`` (nearest rank), ``mean`` and ``max`` of ``values``, rounded to 0.1 s."""
    if not values:
        return {**{f"p{q}": None for q in PERCENTILES}, "mean": None, "max": None}
    s = sorted(values)
    out: dict[str, float | None] = {f"p{q}": round(s[max(0, math.ceil(q / 100 * len(s)) - 1)], 1) for q in PERCENTILES}
    return out | {"mean": round(sum(s) / len(s), 1), "max": round(s[-1], 1)}


@attrs.define
class TimedReplay:
    """What a timed replay reads: nodes, pods, the scheduler config, the queues and the cycle period."""

    nodes_file: str
    pods_file: str
    config: SchedulerConfig
    period: float = 10.0
    queue_column: str | None = None
    queues_file: str | None = None
    speedup: float = 1.0

    def run(self, seed: int, progress: bool = False) -> tuple[dict, Timeline]:
        start = time.perf_counter()
        nodes = seeded_names(read_nodes(self.nodes_file), seed)
        trace = sped_up(read_pods(self.pods_file, self.queue_column, timed=True), self.speedup)
        queues = trace_queues(trace, self.queues_file, self.pods_file, self.queue_column)
        state = _State(nodes, queues, trace, float(self.period), progress_bar(len(trace), progress))
        plugins, actions = prepare(self.config)
        run = Run("timed", self.config, 0, state.snapshot, state.feed)
        try:
            for session in run_cycles(run, plugins, actions, state.times()):
                state.observe(session)
        finally:
            if state.bar is not None:
                state.bar.close()
        state.finish()
        report = state.report(seed, nodes, float(self.period), time.perf_counter() - start)
        return {**report, "speedup": self.speedup}, state.timeline


def sped_up(trace: list[TracePod], speedup: float) -> list[TracePod]:
    """``trace`` with arrivals ``speedup`` times as frequent (times after the first arrival divided by it) and
    every pod's run time kept."""
    if speedup == 1 or not trace:
        return trace
    first = min(p.creation for p in trace)
    out = []
    for p in trace:
        creation = first + (p.creation - first) / speedup
        deletion = None if p.deletion is None else creation + p.deletion - p.creation
        out.append(attrs.evolve(p, creation=creation, deletion=deletion))
    return out


class _State:
    """The cluster between cycles: pods to come, pods in the cluster, completions ahead, and the timeline."""

    def __init__(self, nodes, queues: list[Queue], trace: list[TracePod], period: float, bar) -> None:
        self.nodes, self.queues, self.period, self.bar = nodes, queues, period, bar
        self.capacity = int(round(sum(n.allocatable.gpu for n in nodes))) * 1000
        horizon = max((t for p in trace for t in (p.creation, p.deletion) if t is not None), default=0.0)
        self.pods = [Pod(p, (horizon if p.deletion is None else p.deletion) - p.creation,
                         arrival_job(p, p.creation)) for p in sorted(trace, key=lambda p: (p.creation, p.name))]
        self.next_arrival = 0
        #: Pods in the cluster (pending or running), by job uid.
        self.active: dict[str, Pod] = {}
        #: (finish time, job uid) of the running pods; an entry whose pod's finish differs is stale.
        self.completions: list[tuple[float, str]] = []
        self.used = 0
        self.now = 0.0
        self.busy_milli_s = 0.0
        self.last_change = 0.0
        self.decided = True
        self.evictions = 0
        #: Jobs stopped at their declared maximum runtime.
        self.stopped = 0
        self.cycles = 0
        #: The last session's (allocated, fair share) GPUs per queue.
        self.session_queues: dict[str, tuple[float, float]] = {}
        self.timeline = Timeline()

    # --- the clock ------------------------------------------------------------------------------

    def times(self):
        """The cycle times, worked out after each cycle was fed back; arrivals and completions up to a
        time are applied before its cycle."""
        k = 0
        while True:
            self.now = k * self.period
            self._advance(self.now)
            if any(p.pending for p in self.active.values()) or self._overdue(self.now):
                self.cycles += 1
                yield self.now
                if self.decided:
                    k += 1
                    continue
            upcoming = [t for t in (self._next_arrival_time(), self._next_completion(), self._next_runtime_end())
                        if t is not None]
            if not upcoming:
                return
            k = max(k + 1, math.ceil(min(upcoming) / self.period))

    def _next_arrival_time(self) -> float | None:
        return self.pods[self.next_arrival].trace.creation if self.next_arrival < len(self.pods) else None

    def _next_completion(self) -> float | None:
        while self.completions and self._stale(self.completions[0]):
            heapq.heappop(self.completions)
        return self.completions[0][0] if self.completions else None

    def _next_runtime_end(self) -> float | None:
        """The first time a running job reaches its declared maximum runtime before it would finish."""
        ends = [end for p in self.active.values() if p.finish is not None
                and (end := p.job.runtime_end()) is not None and end < p.finish]
        return min(ends, default=None)

    def _overdue(self, now: float) -> bool:
        """Whether a running job has reached its declared maximum runtime before it finished."""
        end = self._next_runtime_end()
        return end is not None and end <= now

    def _stale(self, entry: tuple[float, str]) -> bool:
        pod = self.active.get(entry[1])
        return pod is None or pod.finish != entry[0]

    def _advance(self, now: float) -> None:
        """Apply the completions and arrivals up to ``now`` in time order (a completion first on a tie)."""
        while True:
            completion, arrival = self._next_completion(), self._next_arrival_time()
            if completion is not None and completion <= now and (arrival is None or completion <= arrival):
                self._complete()
            elif arrival is not None and arrival <= now:
                self._arrive()
            else:
                return

    def _arrive(self) -> None:
        pod = self.pods[self.next_arrival]
        self.next_arrival += 1
        self.active[pod.job.uid] = pod
        self._event(pod.trace.creation, "arrive", pod, None)
        if self.bar is not None:
            self.bar.update()

    def _complete(self) -> None:
        at, uid = heapq.heappop(self.completions)
        pod = self.active.pop(uid)
        node = pod.node
        self._use(at, -pod.trace.gpu_milli_total)
        pod.done, pod.finish = at, None
        self._event(at, "complete", pod, node)

    def finish(self) -> None:
        """Run the remaining pods to completion (nothing is pending that could still be placed)."""
        while self._next_completion() is not None:
            self._complete()

    # --- one cycle ------------------------------------------------------------------------------

    def snapshot(self, now: float):
        return build_snapshot(self.nodes, self.queues, [p.job for p in self.active.values()], now)

    def observe(self, session: Session) -> None:
        """Record the open session's per-queue allocation and fair share (GPUs)."""
        queues = {}
        for queue in session.queues.values():
            found = session.hook.kai_queue_resources(session=session, queue=queue)
            if found is not None:
                queues[queue.name] = (round(found[0].gpu, 3), round(found[2].gpu, 3))
        self.session_queues = queues

    def feed(self, session: Session) -> None:
        """Start the runs of the pods the session bound, stop those of the pods it evicted, and settle the
        tasks for the next cycle."""
        now = session.now
        evicted = {d.task.uid for d in session.decisions if d.kind == "evict"}
        self.decided = bool(session.decisions)
        for pod in list(self.active.values()):
            tasks = pod.tasks
            if pod.finish is not None and any(t.uid in evicted for t in tasks):
                self.evictions += 1
                self._use(now, -pod.trace.gpu_milli_total)
                pod.finish = None
                pod.job.last_eviction = now
                end = pod.job.runtime_end()
                self._event(now, "evict", pod, pod.node)
                for t in tasks:  # the whole gang goes
                    if t.uid not in evicted:
                        t.status, t.node = TaskStatus.PENDING, None
                if end is not None and end <= now:  # stopped at its runtime limit
                    self.stopped += 1
                    del self.active[pod.job.uid]
                    pod.done = now
                    continue
            if tasks[0].status is TaskStatus.BINDING and all(t.status is TaskStatus.BINDING for t in tasks):
                self._use(now, pod.trace.gpu_milli_total)
                pod.finish = now + pod.run_s
                pod.job.last_start = now
                if pod.first_placed is None:
                    pod.first_placed = now
                heapq.heappush(self.completions, (pod.finish, pod.job.uid))
                self._event(now, "place", pod, pod.node)
        feed_back_jobs(p.job for p in self.active.values())
        pending = sum(1 for p in self.active.values() if p.pending)
        self.timeline.cycles.append((now, self.used, pending, len(self.active) - pending,
                                     self.session_queues))

    # --- accounting -----------------------------------------------------------------------------

    def _use(self, at: float, milli: int) -> None:
        self.busy_milli_s += self.used * (at - self.last_change)
        self.last_change = at
        self.used += milli

    def _event(self, at: float, kind: str, pod: Pod, node: str | None) -> None:
        self.timeline.events.append((at, kind, pod.trace.name, pod.job.queue, node or "", pod.trace.gpu_milli_total,
                                     self.used))

    def report(self, seed: int, nodes, period: float, wall: float) -> dict:
        # one queueing delay per placed pod
        delays = [p.first_placed - p.trace.creation for p in self.pods if p.first_placed is not None]
        end = self.last_change
        return {
            "seed": seed, "mode": "timed", "period": period, "nodes": len(nodes), "gpus": self.capacity // 1000,
            "pods": len(self.pods), "placed": len(delays), "failed": len(self.pods) - len(delays),
            "completed": sum(1 for p in self.pods if p.done is not None), "evictions": self.evictions,
            "stopped_at_runtime_limit": self.stopped,
            "cycles": self.cycles, "end_s": end,
            "queueing_delay_s": percentiles(delays),
            "jct_s": percentiles([p.done - p.trace.creation for p in self.pods if p.done is not None]),
            "gpu_utilisation_pct": round(100 * self.busy_milli_s / (self.capacity * end), 3) if end else 0.0,
            "queues": queue_summary(self.timeline.cycles, end),
            "wall_s": round(wall, 3),
        }


def queue_summary(cycles: list[tuple], end: float) -> dict[str, dict[str, float]]:
    """Per queue, the allocated GPUs and fair share GPUs of the cycles, each weighted by the time until the
    next cycle (the last one until ``end``)."""
    sums: dict[str, list[float]] = {}
    total = 0.0
    for i, row in enumerate(cycles):
        weight = (cycles[i + 1][0] if i + 1 < len(cycles) else max(end, row[0])) - row[0]
        total += weight
        for name, (allocated, share) in row[4].items():
            acc = sums.setdefault(name, [0.0, 0.0])
            acc[0] += weight * allocated
            acc[1] += weight * share
    return {name: {"mean_allocated_gpus": round(a / total, 3) if total else 0.0,
                   "mean_fair_share_gpus": round(s / total, 3) if total else 0.0} for name, (a, s) in sums.items()}
