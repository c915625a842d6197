"""One scheduler per node pool against one over the whole cluster, live, side by side.

Run: ``python bench/live_shards.py [--nodes 4000] [--pools 4] [--gpus 8] [--pods 4000] [--one-process]``.

Two runs of ``bench/live_scale.py``'s workload (single-GPU pods, one PodGroup each, in one queue per pool),
each on a private control plane with kwok nodes and a binder:

* ``one shard``: the nodes, queues and PodGroups unlabelled, one ``kai-scheduler run`` serving the default
  partition over every node;
* ``N shards``: the nodes split into ``--pools`` node pools (``kai.scheduler/node-pool=pool-<k>``), a
  SchedulingShard per pool with that ``partitionLabelValue``, each queue and its PodGroups labelled for one
  pool, and one scheduler process per shard (``--scheduling-shard pool-<k>``, as separate replicas run
  them), or one process serving every shard with ``--one-process``.

For each: the seconds from the first pod created until every pod has its BindRequest (the schedulers'
part) and until every pod runs (the binder's too), the schedulers' CPU seconds until the last BindRequest
(summed over their processes) and CPU per placed pod; then the ratios sharded / one shard. Numbers, never
pass/fail.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import live_scale
from live_scale import NAMESPACE, Count, cpu_seconds, create_all, m

from kai.api import names
from kai.dev.controlplane import ControlPlane
from kai.kube.client import Kube, object_path


def start(kubeconfig: str, log: Path, *args: str) -> subprocess.Popen:
    """A ``kai-scheduler run`` process with ``args``, once it logs that it started (its first component)."""
    proc = subprocess.Popen([sys.executable, "-m", "kai.cli", "run", "--kubeconfig", kubeconfig,
                             "--metrics-address=127.0.0.1:0", "--log-level", "INFO", *args],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=log.parent)  # not a source checkout: its ``kai`` would shadow the installed one
    while " started" not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            raise SystemExit(f"exited with {proc.returncode}; see {log}")
        time.sleep(0.2)
    return proc


def run(args: argparse.Namespace, pools: int, workdir: Path) -> dict[str, float] | None:
    """One run on a private control plane with ``pools`` node pools (0: no pools, one shard over all)."""
    workdir.mkdir(parents=True)
    with ControlPlane(state_dir=workdir / "control-plane") as plane:
        kubeconfig = str(plane.kubeconfig)
        kube = Kube.connect(kubeconfig, pool_size=64)
        m.install(kube, live_scale.DEPLOY)
        groups = max(pools, 1)

        def labels(k: int) -> dict[str, str]:
            return {names.NODE_POOL_LABEL: f"pool-{k}"} if pools else {}

        nodes = [m.gpu_node(f"scale-{i}", gpus=args.gpus, labels=labels(i % groups)) for i in range(args.nodes)]
        create_all(kube, nodes)
        queues = []
        for k in range(args.queues):
            queue = m.queue(f"scale-q{k}", gpu_quota=args.nodes * args.gpus // args.queues)
            queue["metadata"]["labels"] = labels(k % groups)
            queues.append(queue)
        create_all(kube, queues)
        m.apply(kube, m.namespace(NAMESPACE))
        for k in range(pools):
            m.apply(kube, {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
                           "metadata": {"name": f"pool-{k}"}, "spec": {"partitionLabelValue": f"pool-{k}"}})
        objects = []
        for i in range(args.pods):
            name, k = f"job-{i}", i % args.queues
            group = m.podgroup(NAMESPACE, name, queue=f"scale-q{k}")
            group["metadata"]["labels"] = labels(k % groups)
            objects += [group, m.pod(NAMESPACE, name, name, gpus=1)]
        running = Count(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", args.pods,
                        field_selector="status.phase=Running")
        requested = Count(kube, m.collection("BindRequest", NAMESPACE), args.pods)
        if not pools or args.one_process:
            shard_args = [["--components", "scheduler"]]
        else:
            shard_args = [["--components", "scheduler", "--scheduling-shard", f"pool-{k}"] for k in range(pools)]
        schedulers = [start(kubeconfig, workdir / f"scheduler-{i}.log", *a) for i, a in enumerate(shard_args)]
        binder = start(kubeconfig, workdir / "binder.log", "--components", "binder")
        procs = [*schedulers, binder]
        try:
            cpu0 = [cpu_seconds(p.pid) for p in schedulers]
            t0 = time.monotonic()
            create_all(kube, objects)
            requested.reached.wait(args.timeout)
            decided = time.monotonic() - t0
            cpu = sum(cpu_seconds(p.pid) - c for p, c in zip(schedulers, cpu0))
            finished = running.reached.wait(args.timeout)
            elapsed = time.monotonic() - t0
            print(f"  {len(requested.names)}/{args.pods} BindRequests after {decided:.1f}s, scheduler CPU "
                  f"{cpu:.1f}s over {len(schedulers)} process(es), {cpu / args.pods * 1000:.1f} ms per placed pod; "
                  f"{len(running.names)} pods Running after {elapsed:.1f}s"
                  + ("" if finished else f" (gave up after {args.timeout:.0f}s)"), flush=True)
            return {"seconds": elapsed, "decided": decided, "cpu": cpu} if finished else None
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            running.informer.stop()
            requested.informer.stop()
            if pools:
                for k in range(pools):
                    kube.delete(object_path(*names.SCHEDULINGSHARDS, name=f"pool-{k}"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4000)
    p.add_argument("--pools", type=int, default=4, help="node pools, one SchedulingShard each")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=4000, help="single-GPU pods, one PodGroup each")
    p.add_argument("--queues", type=int, default=4, help="queues, each labelled for one pool")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--one-process", action="store_true", help="one scheduler process serving every shard")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the private control plane too
    workdir = Path(tempfile.mkdtemp(prefix="kai-shards-"))
    print(f"{args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods in {args.queues} queues ({os.cpu_count()} cores)")
    print("-- one shard over every node", flush=True)
    one = run(args, 0, workdir / "one")
    print(f"-- {args.pools} shards, one per node pool" + (" (one process)" if args.one_process else ""), flush=True)
    sharded = run(args, args.pools, workdir / "sharded")
    if one and sharded:
        print(f"sharded / one shard: time until every pod runs {sharded['seconds'] / one['seconds']:.2f} "
              f"({sharded['seconds']:.1f}s / {one['seconds']:.1f}s), until every BindRequest "
              f"{sharded['decided'] / one['decided']:.2f} ({sharded['decided']:.1f}s / {one['decided']:.1f}s), "
              "scheduler CPU per placed pod "
              f"{sharded['cpu'] / one['cpu']:.2f} ({sharded['cpu'] / args.pods * 1000:.1f} ms / "
              f"{one['cpu'] / args.pods * 1000:.1f} ms)")
    print(f"logs in {workdir}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
