"""``kai-scheduler replay``: replay a GPU cluster trace through the kernel, the FGD paper's way.

``--mode inflate`` (the default) follows the paper (:mod:`kai.sim.replay.inflate`); ``--mode timed`` replays
the trace on its own clock (:mod:`kai.sim.replay.timed`). See ``docs/replay.md``.
"""

from __future__ import annotations

import argparse
import json
import sys

from kai.framework import DEFAULT_CONFIG, load_config
from kai.sim.replay.inflate import Replay
from kai.sim.replay.out import write_run
from kai.sim.replay.sweep import sweep
from kai.sim.replay.timed import TimedReplay
from kai.sim.replay.trace import default_file

PROG = "kai-scheduler replay"
#: With ``--out``, the fragmentation is measured every this many arrivals.
FRAG_EVERY = 100


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
            note = write_run(args.out, record, report)
            if note:
                print(note, file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    else:
        for r in results:
            print(summary_line(r))
    return 0


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
