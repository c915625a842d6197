"""Reservation and backfill on a timed trace replay: large gangs' queueing delay and GPU utilisation, off and on.

Run: ``python bench/backfill_replay.py [--nodes 16] [--start 118] [--days 20] [--load 0.6] [--gang-every 3600]
[--json]``. The shipped trace's whole-GPU pods with a deletion time, from ``--days`` days from day ``--start``, their
run times capped at ``--max-run``, arrive sped up so that they ask ``--load`` of the GPUs of the first ``--nodes``
8-GPU nodes of the shipped node list; every ``--gang-every`` seconds of the replayed clock a gang of 2 or 4 pods of
8 GPUs (16 or 32 GPUs, for one or two hours) arrives among them. Every job declares a maximum runtime above its run
time (1.2 to 3 times it, seeded). The same trace is replayed twice with the default configuration, once as it is
and once with the reservation policy on with its defaults (gangs of 16 GPUs or more reserve, each reservation for
up to ``--hold``, by default the policy's ``maxDuration``); the table shows the queueing delay of the large gangs
and of the other jobs (p50, p95, seconds), the jobs never placed, the evictions and the GPU utilisation of each run:
the busy GPU time (also the runs an eviction cut short, whose pods run again from the start) and the useful one
(only the runs that completed), each over the time until the last pod ends. Not a test: no pass/fail.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import tempfile
from pathlib import Path

import attrs

from kai.common.durations import duration_flag
from kai.framework import DEFAULT_CONFIG
from kai.framework.reservation import ReservationPolicy
from kai.sim.replay.timed import TimedReplay
from kai.sim.replay.trace import default_file

DAY = 86_400.0
LARGE_GPUS = 16
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time",
               "replicas", "max_runtime")


def write_nodes(path: Path, count: int) -> None:
    with open(default_file("nodes"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["gpu"] == "8"][:count]
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
        out.writeheader()
        out.writerows({k: r[k] for k in out.fieldnames} for r in rows)


def write_pods(path: Path, gpus: int, args: argparse.Namespace) -> float:
    """The trace's whole-GPU pods of the window (run times capped at ``--max-run``, arrivals sped up to load the
    cluster to ``--load``) and the gangs, every job with a declared maximum runtime; returns the speedup."""
    rng = random.Random(args.seed)
    start, end = args.start * DAY, (args.start + args.days) * DAY
    with open(default_file("pods"), newline="") as f:
        trace = [r for r in csv.DictReader(f) if r["deletion_time"] and r["gpu_milli"] == "1000"
                 and start <= float(r["creation_time"]) < end]
    runs = [min(float(r["deletion_time"]) - float(r["creation_time"]), args.max_run) for r in trace]
    work = sum(int(r["num_gpu"]) * run for r, run in zip(trace, runs))
    speedup = args.load * gpus * (end - start) / work
    rows = []
    for r, run in zip(trace, runs):
        creation = (float(r["creation_time"]) - start) / speedup
        rows.append({"name": r["name"], "cpu_milli": r["cpu_milli"], "memory_mib": r["memory_mib"],
                     "num_gpu": r["num_gpu"], "gpu_milli": "1000", "creation_time": round(creation, 1),
                     "deletion_time": round(creation + run, 1), "replicas": 1, "max_runtime": _declared(run, rng)})
    for k in range(int((end - start) / speedup // args.gang_every)):
        creation = (k + 0.5) * args.gang_every
        run = rng.choice((3600.0, 7200.0))
        rows.append({"name": f"gang-{k:03}", "cpu_milli": 8000, "memory_mib": 65536, "num_gpu": 8,
                     "gpu_milli": "1000", "creation_time": creation, "deletion_time": creation + run,
                     "replicas": rng.choice((2, 4)), "max_runtime": _declared(run, rng)})
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, POD_COLUMNS)
        out.writeheader()
        out.writerows(sorted(rows, key=lambda r: (float(r["creation_time"]), r["name"])))
    return speedup


def _declared(run: float, rng: random.Random) -> float:
    """What a user declares: 1.2 to 3 times the run time, in whole minutes."""
    return 60.0 * math.ceil(run * rng.uniform(1.2, 3.0) / 60.0)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[max(0, math.ceil(q / 100 * len(s)) - 1)], 1)


def measure(nodes: Path, pods: Path, policy: ReservationPolicy, seed: int) -> dict:
    config = attrs.evolve(DEFAULT_CONFIG, reservation=policy)
    report, timeline = TimedReplay(str(nodes), str(pods), config, 10.0).run(seed)
    arrived: dict[str, float] = {}
    placed: dict[str, tuple[float, int]] = {}
    started: dict[str, float] = {}
    useful = 0.0  # milli-GPU seconds of the runs that completed, without those an eviction cut short
    for at, kind, pod, _queue, _node, milli, _used in timeline.events:
        if kind == "arrive":
            arrived[pod] = at
        elif kind == "place":
            started[pod] = at
            placed.setdefault(pod, (at - arrived[pod], milli))
        elif kind == "complete":
            useful += milli * (at - started[pod])
    large = [d for d, milli in placed.values() if milli >= LARGE_GPUS * 1000]
    small = [d for d, milli in placed.values() if milli < LARGE_GPUS * 1000]
    waiting = sum(1 for pod in arrived if pod not in placed)
    return {"large_gangs": len(large), "large_p50_s": percentile(large, 50), "large_p95_s": percentile(large, 95),
            "small_jobs": len(small), "small_p50_s": percentile(small, 50), "small_p95_s": percentile(small, 95),
            "never_placed": waiting, "evictions": report["evictions"],
            "gpu_utilisation_pct": report["gpu_utilisation_pct"],
            "useful_utilisation_pct": round(100 * useful / (report["gpus"] * 1000 * report["end_s"]), 3),
            "end_s": report["end_s"], "cycles": report["cycles"], "wall_s": report["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16, help="8-GPU nodes of the shipped node list")
    parser.add_argument("--start", type=float, default=118.0, help="first day of the shipped trace")
    parser.add_argument("--days", type=float, default=20.0, help="days of the shipped trace")
    parser.add_argument("--load", type=float, default=0.6, help="the trace's share of the GPUs (sets the speedup)")
    parser.add_argument("--max-run", type=float, default=4 * 3600.0, help="run times capped at this (seconds)")
    parser.add_argument("--gang-every", type=float, default=3600.0, help="seconds between large gangs")
    parser.add_argument("--hold", type=duration_flag, default=ReservationPolicy().duration,
                        help="how long a reservation holds (the policy's maxDuration; default: its default)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        nodes, pods = Path(tmp) / "nodes.csv", Path(tmp) / "pods.csv"
        write_nodes(nodes, args.nodes)
        speedup = write_pods(pods, args.nodes * 8, args)
        on = ReservationPolicy(enabled=True, duration=args.hold)
        runs = {"off": measure(nodes, pods, ReservationPolicy(), args.seed), "on": measure(nodes, pods, on, args.seed)}
    if args.json:
        print(json.dumps({"speedup": round(speedup, 2), **runs}, indent=2))
        return
    print(f"timed replay: {args.nodes} nodes x 8 GPUs; days {args.start:g}-{args.start + args.days:g} of the shipped "
          f"trace x{speedup:.1f} (run times capped at {args.max_run:g}s); a gang of 16 or 32 GPUs every "
          f"{args.gang_every:g}s; reservation and backfill off / on")
    for key in runs["off"]:
        print(f"  {key:22} {runs['off'][key]!s:>12} {runs['on'][key]!s:>12}")


if __name__ == "__main__":
    main()
