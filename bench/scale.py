"""Scale benchmarks: KAI's benchmark shapes grown to thousands of nodes, generated in memory.

Run: ``python bench/scale.py [--shapes allocate-500 allocate-1000 ...] [--repeat N] [--steady]``. Each
shape runs in a process of its own, so its peak memory (max RSS) is its own; the timed part is what
``kai-scheduler bench`` times (snapshot, session, plugins' session open and the actions). Prints one
line per shape: wall and CPU medians, the CPU medians of the phases (snapshot: the domain objects, their
validation and the session's node accounting; open: the plugins' session open; actions; close) and the
peak RSS. With ``--steady`` every timed cycle reuses the snapshot of two untimed cycles before (rewound
by the next session), as a scheduler that keeps its domain objects from cycle to cycle does. Not a test:
no pass/fail; each shape prints a hash of its decisions, to compare between versions.

Shapes:

* ``allocate-N``: KAI's ``BenchmarkAllocateAction`` grown to N nodes of 8 GPUs, 5 pending
  single-GPU jobs per node in 4 queues under 2 departments (allocate alone).
* ``cycle-5000``: 5,000 nodes of 8 GPUs with 100,000 running pods (4 single-GPU pods and 16
  CPU pods per node) and 5,000 pending single-GPU jobs in 200 queues, the full cycle
  (allocate, consolidation, reclaim, preempt, stale-gang eviction).
* ``live-cycle-N``: the live scheduler's cycle at N nodes of 8 GPUs (``bench/live_cycle.py``): a
  ClusterCache filled as its informers fill it (90 % of the GPUs running single-GPU pods, each with its
  PodGroup and BindRequest), then cycles (snapshot, session, the committer's pass with its writes
  counted, not sent) while between them 40 bound pods turn Running, the last cycle's binds are bound
  and 10 pending pods arrive; prints the CPU per part (``watch`` is the informers applying the
  changes) and a hash of the decisions.
* ``replay-default``: one decision per cycle on a growing cluster -- the inflate replay of the shipped
  trace (``kai-scheduler replay --seed 42``, default config: 1,213 nodes, 10,771 arrivals, one
  allocate step each); prints the CPU per decision instead of phases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import time

ALLOCATE_SIZES = (500, 1000, 2000, 5000)
DEFAULT_SHAPES = ("allocate-500", "allocate-1000", "allocate-2000", "cycle-5000", "live-cycle-500", "replay-default")
ALL_SHAPES = tuple(f"allocate-{n}" for n in ALLOCATE_SIZES) + ("cycle-5000", "live-cycle-500", "replay-default")
CONFIG = {"plugins": "default", "predicates": True, "max_consolidation_preemptees": -1,
          "allow_consolidating_reclaim": True, "staleness_grace_period_seconds": 0}


def _queues(leaves: int, gpus: float) -> list[dict]:
    """Two departments sharing ``gpus`` half and half, ``leaves`` leaf queues split between them."""
    depts = [{"name": f"dept-{d}", "priority": 100, "deserved_gpus": gpus / 2, "max_allowed_gpus": -1,
              "over_quota_weight": gpus / 2} for d in "ab"]
    leaf = [{"name": f"queue-{q}", "parent": f"dept-{'ab'[q % 2]}", "priority": 100,
             "deserved_gpus": gpus / leaves, "max_allowed_gpus": -1, "over_quota_weight": 1}
            for q in range(leaves)]
    return depts + leaf


def _job(name: str, queue: str, age: int, gpus: float, tasks: list[dict], **extra) -> dict:
    return {"name": name, "queue": queue, "priority": 50, "preemptible": True, "created_minutes_ago": age,
            "gpus_per_task": gpus, "min_available": 1, "tasks": tasks, **extra}


def allocate_shape(nodes: int) -> dict:
    """KAI's allocate benchmark with ``nodes`` nodes: 8 GPUs each, 5 pending single-GPU jobs per node."""
    jobs = [_job(f"job-{j}", f"queue-{j % 4}", 5 * nodes - j, 1, [{"name": f"job-{j}-0", "state": "Pending"}])
            for j in range(5 * nodes)]
    return {"name": f"allocate-{nodes}", "actions": ["allocate"], "mode": "single_session", "config": CONFIG,
            "nodes": {f"node-{i}": {"gpus": 8} for i in range(nodes)}, "queues": _queues(4, 8.0 * nodes),
            "jobs": jobs}


def cycle_shape(nodes: int = 5000, running_per_node: int = 20, gpu_pods_per_node: int = 4,
                pending: int = 5000, queues: int = 200) -> dict:
    """A full cycle on a busy cluster: every node runs ``running_per_node`` pods, ``gpu_pods_per_node`` of
    them on one GPU each, the others CPU only; ``pending`` single-GPU jobs wait in ``queues`` queues."""
    jobs, j = [], 0
    for i in range(nodes):
        for k in range(running_per_node):
            gpus = 1 if k < gpu_pods_per_node else 0
            jobs.append(_job(f"run-{j}", f"queue-{j % queues}", 10_000, gpus,
                             [{"name": f"run-{j}-0", "state": "Running", "node": f"node-{i}"}],
                             cpu_millis_per_task=250, memory_bytes_per_task=2**28))
            j += 1
    for p in range(pending):
        jobs.append(_job(f"job-{p}", f"queue-{p % queues}", pending - p, 1,
                         [{"name": f"job-{p}-0", "state": "Pending"}]))
    return {"name": f"cycle-{nodes}", "actions": ["allocate", "consolidation", "reclaim", "preempt",
                                                   "stalegangeviction"],
            "mode": "single_session", "config": CONFIG,
            "nodes": {f"node-{i}": {"gpus": 8, "cpu_millis": 128_000, "memory_bytes": 2**40} for i in range(nodes)},
            "queues": _queues(queues, 8.0 * nodes), "jobs": jobs}


def shape(name: str) -> dict | None:
    """The scenario of a generated shape (None for ``replay-default``, which reads the shipped trace)."""
    if name == "replay-default" or _live_nodes(name):
        return None
    kind, _, size = name.partition("-")
    if kind == "allocate" and size.isdigit():
        return allocate_shape(int(size))
    if kind == "cycle" and size.isdigit():
        return cycle_shape(int(size))
    raise SystemExit(f"unknown shape {name!r}; known: {', '.join(ALL_SHAPES)}")


def _live_nodes(name: str) -> int:
    """The node count of a ``live-cycle-N`` shape, else 0."""
    size = name.removeprefix("live-cycle-")
    return int(size) if size != name and size.isdigit() else 0


PHASES = ("snapshot", "open", "actions", "close")


def decision_hash(decisions) -> str:
    """A short hash of a cycle's decisions (kind, task, node), the same in every run that decides the same."""
    return hashlib.sha256(";".join(sorted(f"{d.kind}:{d.task.uid}:{d.node}" for d in decisions)).encode()
                          ).hexdigest()[:16]


def time_cycle(scenario, plugins, snapshot=None) -> tuple[float, dict[str, float], str]:
    """Wall seconds of one cycle, the CPU seconds of its phases and the hash of its decisions; the cycle runs on
    ``snapshot`` when given, else on a fresh one."""
    from kai.framework import Session
    from kai.sim.scenario import NOW

    wall, cpu = time.perf_counter(), [time.process_time()]
    session = Session(scenario.build(NOW) if snapshot is None else snapshot, plugins)
    cpu.append(time.process_time())
    session.open()
    cpu.append(time.process_time())
    session.run_actions(scenario.actions)
    cpu.append(time.process_time())
    session.close()
    cpu.append(time.process_time())
    return (time.perf_counter() - wall, {p: cpu[k + 1] - cpu[k] for k, p in enumerate(PHASES)},
            decision_hash(session.decisions))


def run_replay(repeat: int) -> dict:
    """Time ``repeat`` inflate replays of the shipped trace with the default config, seed 42."""
    from kai.framework import DEFAULT_CONFIG
    from kai.sim.replay.inflate import Replay
    from kai.sim.replay.trace import default_file

    replay = Replay(default_file("nodes"), default_file("pods"), DEFAULT_CONFIG)
    runs = []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        report, _ = replay.run(42)
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    cpu_median = statistics.median(c for _, c in runs)
    return {"shape": "replay-default", "steady": False, "median_s": statistics.median(w for w, _ in runs),
            "cpu_median_s": cpu_median, "phases_cpu_median_s": {}, "repeats": repeat,
            "cpu_per_decision_ms": 1000 * cpu_median / report["pods"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_shape(name: str, repeat: int, steady: bool) -> dict:
    """Time one shape in this process: ``repeat`` cycles after a warm-up one (skipped for one cold cycle)."""
    if name == "replay-default":
        return run_replay(repeat)
    if _live_nodes(name):
        import live_cycle

        result = live_cycle.run(_live_nodes(name), repeat)
        return {"shape": name, "steady": True,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **result}
    from kai.sim.conformance import Runner
    from kai.sim.scenario import NOW, load_scenarios

    scenario = load_scenarios(f"<{name}>", [shape(name)])[0]
    plugins = Runner().plugins(scenario)
    snapshot = scenario.build(NOW) if steady else None
    for _ in range(2 if steady else int(repeat > 1)):  # a reused snapshot keeps its node accounting from the second
        time_cycle(scenario, plugins, snapshot)
    runs = [time_cycle(scenario, plugins, snapshot) for _ in range(repeat)]
    phases = {p: statistics.median(r[p] for _, r, _ in runs) for p in PHASES}
    return {"shape": name, "steady": steady, "median_s": statistics.median(w for w, _, _ in runs),
            "cpu_median_s": statistics.median(sum(r.values()) for _, r, _ in runs), "phases_cpu_median_s": phases,
            "repeats": repeat, "decisions": runs[-1][2],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), metavar="SHAPE",
                        help=f"shapes to run (default {' '.join(DEFAULT_SHAPES)}; known {' '.join(ALL_SHAPES)})")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="timed runs per shape (default 1)")
    parser.add_argument("--steady", action="store_true",
                        help="time cycles on one reused snapshot, after two untimed cycles on it")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead")
    parser.add_argument("--one", metavar="SHAPE", help=argparse.SUPPRESS)  # the child process of one shape
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_shape(args.one, args.repeat, args.steady)))
        return 0
    results = []
    for name in args.shapes:
        shape(name)  # an unknown name fails before anything runs
        out = subprocess.run([sys.executable, __file__, "--one", name, "--repeat", str(args.repeat)]
                             + ["--steady"] * args.steady, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        if not args.json:
            r = results[-1]
            phases = ", ".join(f"{p} {v:.3f}" for p, v in r["phases_cpu_median_s"].items())
            if "cpu_per_decision_ms" in r:
                phases = f"{r['cpu_per_decision_ms']:.2f} ms per decision"
            if "decisions" in r:
                phases += f"; decisions {r['decisions']}"
            print(f"{name}{' (steady)' * r['steady']}: median {r['median_s']:.3f} s, CPU median "
                  f"{r['cpu_median_s']:.3f} s ({phases}) over {r['repeats']} runs, "
                  f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
