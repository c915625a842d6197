"""``kai-scheduler replay``: replay a GPU cluster trace through the kernel, the FGD paper's way.

``inflate`` mode follows the procedure of "Beware of Fragmentation" (USENIX ATC'23): the pods are
sorted by name and shuffled with ``--seed``, then pods drawn from the trace with replacement are
appended until the arrived GPU request reaches ``--target`` % of the cluster's GPUs; each pod then
arrives on its own and gets one scheduling decision, and a pod that finds no node is dropped.
Nothing finishes. All arrivals share one session: each joins it through
:meth:`Session.add_job <kai.framework.session.Session.add_job>` and the allocate action's
:func:`~kai.framework.actions.allocate.allocate_arrival` places it with the configured plugins, so
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

from kai.api import Job, Node, PodSet, Queue, QuotaSpec, Task, TaskStatus
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, Session, build_snapshot, load_config
from kai.framework.actions.allocate import allocate_arrival
from kai.sim.replay_metric import ARRIVED_POINTS, Sample, unallocated_pct_at
from kai.sim.replay_trace import TracePod, default_file, read_nodes, read_pods

PROG = "kai-scheduler replay"
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


def seeded_names(nodes: list[Node], seed: int) -> list[Node]:
    """The nodes renamed ``NNNN-<name>`` with a seeded permutation, as the paper's simulator does: the
    kernel breaks ties between equally scored nodes by name, so ties fall randomly but reproducibly."""
    order = random.Random(f"nodes-{seed}").sample(range(len(nodes)), len(nodes))
    width = len(str(len(nodes)))
    return [attrs.evolve(n, name=f"{k:0{width}d}-{n.name}") for k, n in zip(order, sorted(nodes, key=lambda n: n.name))]


def arrival_job(pod: TracePod) -> Job:
    """The one-pod job a trace pod arrives as (preemptible, in its queue)."""
    job = Job(pod.name, pod.queue, 0, True, NOW, uid=pod.name, pod_sets={"default": PodSet("default", 1)})
    task = Task(pod.name, pod.name, pod.request(), TaskStatus.PENDING, None, node_affinity=pod.node_affinity(),
                creation=NOW)
    task.job = job.uid
    job.add_task(task)
    return job


@attrs.define
class Replay:
    """What one replay reads: nodes, pods and the scheduler config."""

    nodes_file: str
    pods_file: str
    config: SchedulerConfig
    target: float = 130.0

    def run(self, seed: int, progress: bool = False) -> dict:
        start = time.perf_counter()
        nodes = seeded_names(read_nodes(self.nodes_file), seed)
        capacity = int(round(sum(n.allocatable.gpu for n in nodes))) * 1000
        arrivals = inflate(read_pods(self.pods_file), capacity, self.target, seed)
        queues = [Queue(q, None, 100, QuotaSpec(0.0, -1.0, 1.0)) for q in dict.fromkeys(p.queue for p in arrivals)]
        session = Session(build_snapshot(nodes, queues, [], NOW), Plugins(self.config)).open()
        session.explain = False  # nobody reads why a dropped arrival fitted nowhere
        samples: list[Sample] = []
        arrived = used = placed = 0
        bar = _progress(len(arrivals), progress)
        try:
            for pod in arrivals:
                job = arrival_job(pod)
                arrived += pod.gpu_milli_total
                if not session.add_job(job) and allocate_arrival(session, job):
                    placed += 1
                    used += pod.gpu_milli_total
                samples.append(Sample(arrived, used))
                if bar is not None:
                    bar.update()
        finally:
            session.close()
            if bar is not None:
                bar.close()
        return {"seed": seed, "mode": "inflate", "target": self.target, "nodes": len(nodes),
                "gpus": capacity // 1000, "pods": len(arrivals), "placed": placed, "failed": len(arrivals) - placed,
                "unallocated_pct_at": unallocated_pct_at(samples, capacity),
                "wall_s": round(time.perf_counter() - start, 3)}, samples


def _progress(total: int, wanted: bool):
    """A progress bar on stderr when asked and tqdm is installed (the ``progress`` extra)."""
    if not wanted or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="pod", file=sys.stderr)


def _run_one(replay: Replay, seed: int) -> dict:
    return replay.run(seed)[0]


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
    parser.add_argument("--mode", choices=["inflate"], default="inflate")
    parser.add_argument("--target", type=float, default=130.0, help="inflate to this %% of GPU capacity (130)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--seeds", type=parse_seeds, help="several seeds, e.g. 42-51 (one result per seed)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes for --seeds")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a summary")
    parser.add_argument("--out", metavar="DIR", help="write the per-arrival CSV of a single run here")
    args = parser.parse_args(argv)
    if args.target <= 0 or args.jobs < 1:
        parser.error("--target and --jobs must be positive")
    config = load_config(args.config) if args.config else DEFAULT_CONFIG
    replay = Replay(args.nodes or default_file("nodes"), args.pods or default_file("pods"), config, args.target)
    if args.seeds:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_run_one, [replay] * len(args.seeds), args.seeds))
        report: dict = {"runs": results}
    else:
        report, samples = replay.run(args.seed, progress=not args.json)
        results = [report]
        if args.out:
            from kai.sim.replay_out import write_samples

            write_samples(args.out, samples, report)
    if args.json:
        print(json.dumps(report))
    else:
        for r in results:
            at = r["unallocated_pct_at"]
            print(f"seed {r['seed']}: {r['pods']} pods, {r['placed']} placed, {r['failed']} failed, "
                  f"unallocated GPU % at arrived " + ", ".join(f"{k}%: {v}" for k, v in at.items())
                  + f" ({r['wall_s']:.1f} s)")
    return 0


__all__ = ["ARRIVED_POINTS", "Replay", "inflate", "main", "parse_seeds", "seeded_names"]
