"""Scale run of ``kai-scheduler run`` on a local control plane: many kwok GPU nodes, thousands of pods.

Run: ``python bench/live_scale.py [--nodes 500] [--gpus 8] [--pods 4000] [--queues 4] [--kubeconfig FILE]``.

Starts a private control plane (etcd, kube-apiserver, kwok; or uses ``--kubeconfig``), installs
KAI's CRDs, creates the nodes and one queue per group of pods, starts the scheduler and the binder
as two processes, then creates the PodGroups and single-GPU pods and prints the time from the
first creation until every pod is Running, and the peak RSS of each process. Not a test: numbers,
no pass/fail. KAI's own figure for 500 nodes x 8 GPUs and 4,000 pods is 6 min 38 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kai.cluster import manifests as m
from kai.cluster.client import Kube
from kai.cluster.controlplane import ControlPlane
from kai.cluster.convert import timestamp
from kai.cluster.watch import Informer

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
NAMESPACE = "scale"


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def create_all(kube: Kube, objects: list[dict], workers: int = 32) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(lambda obj: m.apply(kube, obj), objects):
            pass


def report_latencies(kube: Kube) -> None:
    """Seconds from each pod's creation to its BindRequest's (the scheduler's share of the total)."""
    pods = {p["metadata"]["name"]: timestamp(p["metadata"]["creationTimestamp"])
            for p in kube.get(m.collection("Pod", NAMESPACE)).get("items", [])}
    waits = sorted(timestamp(b["metadata"]["creationTimestamp"]) - pods[b["metadata"]["name"]]
                   for b in kube.get(m.collection("BindRequest", NAMESPACE)).get("items", [])
                   if b["metadata"]["name"] in pods)
    if waits:
        pick = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))]  # noqa: E731
        print(f"pod creation -> BindRequest (s, whole-second timestamps): p50 {pick(0.5):.0f}, "
              f"p99 {pick(0.99):.0f}, max {waits[-1]:.0f} over {len(waits)} pods")


def run(args: argparse.Namespace, kubeconfig: str, workdir: Path) -> None:
    kube = Kube.connect(kubeconfig, pool_size=64)
    m.install(kube, DEPLOY)
    started = time.monotonic()
    create_all(kube, [m.gpu_node(f"scale-{i}", gpus=args.gpus) for i in range(args.nodes)])
    queues = [f"scale-q{k}" for k in range(args.queues)]
    create_all(kube, [m.queue(q, gpu_quota=args.nodes * args.gpus // args.queues) for q in queues])
    m.apply(kube, m.namespace(NAMESPACE))
    print(f"{args.nodes} nodes, {args.queues} queues created in {time.monotonic() - started:.1f}s", flush=True)

    running: set[str] = set()
    done = threading.Event()

    def on_pod(kind: str, pod: dict) -> None:
        name = pod["metadata"]["name"]
        if kind != "DELETED" and pod.get("status", {}).get("phase") == "Running":
            running.add(name)
            if len(running) >= args.pods:
                done.set()

    watcher = Informer(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", on_event=on_pod,
                       transform=lambda p: {"metadata": {"name": p["metadata"]["name"]},
                                            "status": {"phase": p.get("status", {}).get("phase")}}).start()
    watcher.wait_synced(30)

    procs = {}
    try:
        for component in ("scheduler", "binder"):
            log = open(workdir / f"{component}.log", "wb")
            procs[component] = subprocess.Popen(
                [sys.executable, "-m", "kai.cli", "run", "--kubeconfig", kubeconfig, "--components", component,
                 "--metrics-address=127.0.0.1:0", "--log-level", "INFO", *args.run_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for component, proc in procs.items():  # wait until both have listed the cluster
            while f"{component} started" not in (workdir / f"{component}.log").read_text(errors="replace"):
                if proc.poll() is not None:
                    raise SystemExit(f"{component} exited with {proc.returncode}; see {workdir}/{component}.log")
                time.sleep(0.2)

        objects = []
        for i in range(args.pods):
            name = f"job-{i}"
            objects.append(m.podgroup(NAMESPACE, name, queue=queues[i % len(queues)]))
            objects.append(m.pod(NAMESPACE, name, name, gpus=1))
        t0 = time.monotonic()
        create_all(kube, objects)
        print(f"{args.pods} PodGroups and pods created in {time.monotonic() - t0:.1f}s", flush=True)
        finished = done.wait(args.timeout)
        elapsed = time.monotonic() - t0
        print(f"{len(running)}/{args.pods} pods Running {elapsed:.1f}s after the first creation"
              + ("" if finished else f" (gave up after {args.timeout:.0f}s)"))
        for component, proc in procs.items():
            print(f"{component}: peak RSS {peak_rss_mib(proc.pid):.0f} MiB")
        report_latencies(kube)
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        watcher.stop()
        print(f"logs in {workdir}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=4000, help="single-GPU pods, one PodGroup each")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--kubeconfig", help="use this cluster instead of starting a private control plane")
    p.add_argument("run_args", nargs="*", help="extra arguments of kai-scheduler run (after --)")
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kai-scale-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the private control plane too
    if args.kubeconfig:
        run(args, args.kubeconfig, workdir)
        return
    with ControlPlane(state_dir=workdir / "control-plane") as plane:
        run(args, str(plane.kubeconfig), workdir)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
