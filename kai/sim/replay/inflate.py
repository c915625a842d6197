"""``kai-scheduler replay`` in ``inflate`` mode: the FGD paper's procedure.

The procedure of "Beware of Fragmentation" (USENIX ATC'23): the pods are sorted by name and shuffled with
``--seed``, then pods drawn from the trace with replacement are appended until the arrived GPU request
reaches ``--target`` % of the cluster's GPUs; each pod then arrives on its own and gets one scheduling
decision, and a pod that finds no node is dropped. Nothing finishes. All arrivals share one session: each
joins it through :meth:`Session.add_job <kai.framework.session.Session.add_job>` and the allocate action's
:func:`~kai.actions.allocate.allocate_arrival` places it with the configured plugins, so a
placement policy is a scheduler config (``--config``). See ``docs/replay.md``.
"""

from __future__ import annotations

import random
import time

import attrs

from kai.actions.allocate import allocate_arrival
from kai.api import Queue, QuotaSpec
from kai.framework import Plugins, SchedulerConfig, Session, build_snapshot
from kai.sim.replay.frag import Fragmentation
from kai.sim.replay.metric import Sample, unallocated_pct_at
from kai.sim.replay.progress import progress_bar
from kai.sim.replay.trace import TracePod, arrival_job, read_nodes, read_pods, seeded_names

NOW = 1_800_000_000.0


def inflate(pods: list[TracePod], capacity_milli: int, target_pct: float, seed: int) -> list[TracePod]:
    """The arrival order of the paper's inflate mode: the pods by name, shuffled, then pods drawn from
    them uniformly with replacement until the next draw would take the arrived GPU request over
    ``target_pct`` % of ``capacity_milli`` (the artifact compares the draw's per-GPU milli)."""
    rng = random.Random(seed)
    original = sorted(pods, key=lambda p: p.name)
    order = list(original)
    rng.shuffle(order)
    limit = capacity_milli * target_pct / 100
    total = sum(p.gpu_milli_total for p in order)
    i = 0
    while total < limit:
        pick = original[rng.randrange(len(original))]
        if total + pick.gpu_milli > limit:
            break
        order.append(attrs.evolve(pick, name=f"{pick.name}-tuned-{i}"))
        total += pick.gpu_milli_total
        i += 1
    return order


@attrs.define
class InflateRecord:
    """What an inflate replay records: a sample per arrival, and (arrival, arrived milli-GPU, fragment
    milli-GPU, idle milli-GPU) every ``frag_every`` arrivals."""

    samples: list[Sample] = attrs.field(factory=list)
    fragmentation: list[tuple[int, int, float, float]] = attrs.field(factory=list)


@attrs.define
class Replay:
    """What one replay reads: nodes, pods and the scheduler config."""

    nodes_file: str
    pods_file: str
    config: SchedulerConfig
    target: float = 130.0
    #: Measure the fragmentation every this many arrivals (0: never).
    frag_every: int = 0

    def run(self, seed: int, progress: bool = False) -> tuple[dict, InflateRecord]:
        start = time.perf_counter()
        nodes = seeded_names(read_nodes(self.nodes_file), seed)
        capacity = int(round(sum(n.allocatable.gpu for n in nodes))) * 1000
        trace = read_pods(self.pods_file)
        arrivals = inflate(trace, capacity, self.target, seed)
        record = InflateRecord()
        frag = Fragmentation(trace) if self.frag_every else None
        queues = [Queue(q, None, 100, QuotaSpec(0.0, -1.0, 1.0)) for q in dict.fromkeys(p.queue for p in arrivals)]
        session = Session(build_snapshot(nodes, queues, [], NOW), Plugins(self.config)).open()
        session.explain = False  # nobody reads why a dropped arrival fitted nowhere
        samples = record.samples
        arrived = used = placed = 0
        bar = progress_bar(len(arrivals), progress)
        try:
            for pod in arrivals:
                job = arrival_job(pod, NOW)
                arrived += pod.gpu_milli_total
                if not session.add_job(job) and allocate_arrival(session, job):
                    placed += 1
                    used += pod.gpu_milli_total
                samples.append(Sample(arrived, used))
                if frag is not None and len(samples) % self.frag_every == 0:
                    record.fragmentation.append((len(samples), arrived, *frag.measure(session)))
                if bar is not None:
                    bar.update()
        finally:
            session.close()
            if bar is not None:
                bar.close()
        return {"seed": seed, "mode": "inflate", "target": self.target, "nodes": len(nodes),
                "gpus": capacity // 1000, "pods": len(arrivals), "placed": placed, "failed": len(arrivals) - placed,
                "unallocated_pct_at": unallocated_pct_at(samples, capacity),
                "wall_s": round(time.perf_counter() - start, 3)}, record
