"""The live side by side: ``bench/live_scale.py``'s workload placed by this project, by KAI's own Go components,
by kube-scheduler (plain pods) and by nobody (the floor), one after the other, each on a fresh control plane.

Run: ``python bench/live_versus.py [--nodes 500] [--pods 4000] [--repeat N] [--schedulers project kai
kube-scheduler floor] [--staged] [--json FILE] [--if-available]``.

The order alternates over the repeats (forwards, then backwards), so that neither side always runs first on a
machine that warms up or gets busier. For each scheduler it prints the medians: the time until every pod runs,
pods/s, the time from a pod's creation until it is seen bound (p50, p99), the API server's requests per pod by
verb and resource, the CPU seconds of each process (components and control plane) and each component's peak
RSS; then each one's time as a ratio to KAI's, kube-scheduler's and the floor's. ``--staged`` creates every pod
first and then starts the scheduler: its own pods/s, from its launch until every pod is placed, and the ratios of
those. KAI's components are built
with Go from its source at the pinned commit (``bench/kai_live.py``), kube-scheduler from the modules of the
control plane's kube-apiserver. Not a test: numbers, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from kai.dev.gobuild import ControlPlaneError, ensure_binaries, ensure_kube_scheduler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kai_live  # noqa: E402
import live_scale  # noqa: E402


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def medians(results: list[dict], key: str) -> dict[str, float]:
    """The median of each entry of the dicts ``result[key]`` (0 where a run has none)."""
    names = {name for r in results for name in r[key]}
    return {name: statistics.median(r[key].get(name, 0.0) for r in results)
            for name in sorted(names, key=lambda n: -results[0][key].get(n, 0.0))}


def report(runs: dict[str, list[dict]], pods: int) -> None:
    for scheduler, results in runs.items():
        if not results:
            print(f"\n{scheduler}: no run placed every pod")
            continue
        requests = medians(results, "requests")
        total = sum(requests.values())
        written = sum(v for k, v in requests.items() if k.split()[0] not in live_scale.READS)
        heartbeats = sum(v for k, v in requests.items() if k.split()[1].split("/")[0] in ("nodes", "leases"))
        print(f"\n{scheduler} ({len(results)} runs): {median(results, 'elapsed'):.1f}s until all {pods} pods ran, "
              f"{median(results, 'pods_per_s'):.0f} pods/s; creation -> bound p50 {median(results, 'p50'):.2f}s, "
              f"p99 {median(results, 'p99'):.2f}s; load average " + " / ".join(f"{r['load'][0]:.1f}" for r in results))
        if all(r.get("own") for r in results):
            own = statistics.median(r["own"] for r in results)
            print(f"  staged: every pod placed {own:.1f}s after the scheduler's launch, {pods / own:.0f} pods/s "
                  "(its own rate; each run " + ", ".join(f"{pods / r['own']:.0f}" for r in results) + ")")
        print(f"  API requests per pod: {total:.2f} ({written:.2f} writes, {written - heartbeats:.2f} without kwok's "
              "Node and Lease heartbeats, which grow with the time the run takes): "
              + ", ".join(f"{k} {v:.2f}" for k, v in requests.items()))
        print("  CPU seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in medians(results, "cpu").items()))
        print("  peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in medians(results, "rss").items()))
    times = {s: median(r, "elapsed") for s, r in runs.items() if r}
    print()
    for scheduler, seconds in times.items():
        ratios = [f"{seconds / times[other]:.2f}x {other}" for other in ("kai", "kube-scheduler", "floor")
                  if other in times and other != scheduler]
        print(f"{scheduler}: time until all pods ran, {', '.join(ratios) or 'nothing to compare with'}")
    owns = {s: statistics.median(r["own"] for r in results) for s, results in runs.items()
            if results and all(r.get("own") for r in results)}
    for scheduler, seconds in owns.items():
        ratios = [f"{owns[other] / seconds:.2f}x {other}'s" for other in ("kube-scheduler", "floor")
                  if other in owns and other != scheduler]
        if ratios:
            print(f"{scheduler}: its own pods/s (staged), {', '.join(ratios)}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=4000, help="single-GPU pods")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="runs of each scheduler (default 1)")
    p.add_argument("--schedulers", nargs="+", choices=live_scale.SCHEDULERS, default=list(live_scale.SCHEDULERS))
    p.add_argument("--staged", action="store_true",
                   help="create every pod first, then start the scheduler: each one's own pods/s (not with kai)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every run's numbers to FILE")
    p.add_argument("--if-available", action="store_true",
                   help="without Go or KAI's source, say so in one line and exit 0 (as tox -e bench runs it)")
    args = p.parse_args(argv)
    if args.staged and "kai" in args.schedulers:
        p.error("--staged: project, kube-scheduler and floor")
    try:
        ensure_binaries()
        if "kai" in args.schedulers:
            kai_live.build()
        if "kube-scheduler" in args.schedulers:
            ensure_kube_scheduler()
    except (ControlPlaneError, OSError, subprocess.CalledProcessError) as err:
        if not args.if_available:
            raise
        print(f"live side by side skipped: {err}")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the private control plane too
    runs: dict[str, list[dict]] = {s: [] for s in args.schedulers}
    for r in range(args.repeat):
        for scheduler in args.schedulers if r % 2 == 0 else reversed(args.schedulers):
            print(f"-- {scheduler} (run {r + 1} of {args.repeat})", flush=True)
            run_args = argparse.Namespace(nodes=args.nodes, gpus=args.gpus, pods=args.pods, queues=args.queues,
                                          timeout=args.timeout, scheduler=scheduler, staged=args.staged, shadow=False,
                                          run_args=[])
            result = live_scale.private_run(run_args)
            if result is not None:
                runs[scheduler].append(result)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    report(runs, args.pods)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
