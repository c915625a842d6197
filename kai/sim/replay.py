"""``kai-scheduler replay``: replay a GPU cluster trace through the kernel, the FGD paper's way.

``inflate`` mode follows the procedure of "Beware of Fragmentation" (USENIX ATC'23): the pods are
sorted by name and shuffled with ``--seed``, then pods drawn from the trace with replacement are
appended until the arrived GPU request reaches ``--target`` % of the cluster's GPUs; each pod then
arrives on its own and gets one scheduling decision, and a pod that finds no node is dropped.
Nothing finishes. All arrivals share one session: each joins it through
:meth:`Session.add_job <kai.framework.session.Session.add_job>` and the allocate action's
:func:`~kai.actions.allocate.allocate_arrival` places it with the configured plugins, so
a placement policy is a scheduler config (``--config``). See ``docs/replay.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import attrs

from kai.actions.allocate import allocate_arrival
from kai.api import Job, Node, PodSet, Queue, QuotaSpec, Task, TaskStatus
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, Session, build_snapshot, load_config
from kai.sim.replay_frag import Fragmentation
from kai.sim.replay_metric import ARRIVED_POINTS, Sample, unallocated_pct_at
from kai.sim.replay_trace import TracePod, default_file, read_nodes, read_pods

PROG = "kai-scheduler replay"
NOW = 1_800_000_000.0
#: With ``--out``, the fragmentation is measured every this many arrivals.
FRAG_EVERY = 100


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


def seeded_names(nodes: list[Node], seed: int) -> list[Node]:
    """The nodes renamed ``NNNN-<name>`` with a seeded permutation, as the paper's simulator does: the
    kernel breaks ties between equally scored nodes by name, so ties fall randomly but reproducibly."""
    order = random.Random(f"nodes-{seed}").sample(range(len(nodes)), len(nodes))
    width = len(str(len(nodes)))
    return [attrs.evolve(n, name=f"{k:0{width}d}-{n.name}") for k, n in zip(order, sorted(nodes, key=lambda n: n.name))]


def arrival_job(pod: TracePod, creation: float = NOW) -> Job:
    """The one-pod job a trace pod arrives as (preemptible, in its queue, created at ``creation``)."""
    job = Job(pod.name, pod.queue, 0, True, creation, uid=pod.name, pod_sets={"default": PodSet("default", 1)})
    task = Task(pod.name, pod.name, pod.request(), TaskStatus.PENDING, None, node_affinity=pod.node_affinity(),
                creation=creation)
    task.job = job.uid
    job.add_task(task)
    return job


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
                job = arrival_job(pod)
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


def progress_bar(total: int, wanted: bool):
    """A progress bar on stderr when asked and tqdm is installed (the ``progress`` extra)."""
    if not wanted or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="pod", file=sys.stderr)


def parse_seeds(text: str) -> list[int]:
    """``42``, ``42-51`` or ``42,44,50-51``."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += range(int(lo), int(hi or lo) + 1)
    return seeds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=None, help="node list CSV (default: the shipped Alibaba v2023 GPU nodes)")
    parser.add_argument("--pods", default=None, help="pod list CSV (default: the shipped openb_pod_list_default)")
    parser.add_argument("--config", help="scheduler config (KAI's shape; default: the shipped default config)")
    parser.add_argument("--mode", choices=["inflate", "timed"], default="inflate")
    parser.add_argument("--target", type=float, default=130.0, help="inflate: to this %% of GPU capacity (130)")
    parser.add_argument("--period", type=float, default=10.0, help="timed: seconds of trace time per cycle (10)")
    parser.add_argument("--queue-column", metavar="COLUMN", help="timed: the pod list column naming each pod's queue")
    parser.add_argument("--queues", metavar="FILE", help="timed: the queues (YAML: cluster-file queues or KAI Queues)")
    parser.add_argument("--speedup", type=float, default=1.0, metavar="K",
                        help="timed: arrivals K times as frequent, run times kept (1)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--seeds", type=parse_seeds, help="several seeds, e.g. 42-51 (one result per seed)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes for --seeds")
    parser.add_argument("--ray", metavar="ADDRESS", help="run --seeds as Ray tasks (auto, ray://HOST:PORT, local)")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a summary")
    parser.add_argument("--out", metavar="DIR", help="write the CSVs (and plots) of a single run here")
    args = parser.parse_args(argv)
    if args.target <= 0 or args.jobs < 1 or not 0 < args.period < float("inf") or not 0 < args.speedup < float("inf"):
        parser.error("--target, --period, --speedup and --jobs must be positive")
    if args.mode == "inflate" and (args.queues or args.queue_column or args.speedup != 1):
        parser.error("--queues, --queue-column and --speedup are for --mode timed")
    config = load_config(args.config) if args.config else DEFAULT_CONFIG
    nodes, pods = args.nodes or default_file("nodes"), args.pods or default_file("pods")
    if args.mode == "timed":
        from kai.sim.replay_timed import TimedReplay

        replay: Replay | TimedReplay = TimedReplay(nodes, pods, config, args.period, args.queue_column, args.queues,
                                                   args.speedup)
    else:
        replay = Replay(nodes, pods, config, args.target, FRAG_EVERY if args.out else 0)
    if args.seeds:
        results = sweep(replay, args.seeds, args.jobs, args.ray)
        report: dict = {"runs": results}
    else:
        report, record = replay.run(args.seed, progress=not args.json)
        results = [report]
        if args.out:
            from kai.sim.replay_out import write_run

            note = write_run(args.out, record, report)
            if note:
                print(note, file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    else:
        for r in results:
            print(summary_line(r))
    return 0


def sweep(replay, seeds: list[int], jobs: int, ray_address: str | None) -> list[dict]:
    """One report per seed, in seed order: on a Ray cluster when ``ray_address`` is given, else in ``jobs``
    local processes."""
    if ray_address:
        from kai.sim.replay_ray import ray_sweep

        return ray_sweep(replay, seeds, ray_address)
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(run_one, [replay] * len(seeds), seeds))


def run_one(replay, seed: int) -> dict:
    """The report of one seeded run (what a sweep's worker returns)."""
    return replay.run(seed)[0]


def summary_line(r: dict) -> str:
    """One run's report as a line of text."""
    head = f"seed {r['seed']}: {r['pods']} pods, {r['placed']} placed, {r['failed']} failed"
    if r["mode"] == "timed":
        delay, jct = r["queueing_delay_s"], r["jct_s"]
        return (f"{head}, {r['evictions']} evictions, {r['cycles']} cycles, mean GPU utilisation "
                f"{r['gpu_utilisation_pct']}%, queueing delay p50/p90/p99 {delay['p50']}/{delay['p90']}/"
                f"{delay['p99']} s, JCT p50 {jct['p50']} s ({r['wall_s']:.1f} s)")
    at = r["unallocated_pct_at"]
    return (f"{head}, unallocated GPU % at arrived " + ", ".join(f"{k}%: {v}" for k, v in at.items())
            + f" ({r['wall_s']:.1f} s)")


__all__ = ["ARRIVED_POINTS", "Replay", "inflate", "main", "parse_seeds", "seeded_names"]
