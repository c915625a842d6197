"""Scale run of ``kai-scheduler run`` on a local control plane: many kwok GPU nodes, thousands of pods.

Run: ``python bench/live_scale.py [--nodes 500] [--gpus 8] [--pods 4000] [--queues 4]
[--staged | --floor] [--kubeconfig FILE] [-- RUN-ARGS]``.

Starts a private control plane (etcd, kube-apiserver, kwok; or uses ``--kubeconfig``), installs
KAI's CRDs, creates the nodes and one queue per group of pods, starts the scheduler and the binder
as two processes, then creates the PodGroups and single-GPU pods and prints the time from the
first creation until every pod is Running, the peak RSS of each process and the CPU time each
process (also the control plane's, when private) used meanwhile, the scheduler's CPU per placed pod (and
its CPU and cycles while pods stream in, until every pod has its BindRequest or its node, and in the tail
after it, until every pod runs: how long the binder lags) and each component's API calls (from its
``kai_api_requests_total``) per pod, with its writes by verb and resource, counted once the components'
requests have stopped (the pod conditions and events that report binds trail them; how long is
printed). ``--versus-floor`` first makes the ``--floor`` run on a control plane of its own and reports
the live run's time as a ratio to it (the issue's target: 2.5x). ``--staged`` creates everything
first and then starts the scheduler, then the binder, timing each on the whole backlog;
``--floor`` starts neither and binds every pod with one Binding call: what the control plane alone
needs for the same pods. Not a test: numbers, no pass/fail. KAI's own figure for 500 nodes x 8
GPUs and 4,000 pods is 6 min 38 s.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kai.dev.controlplane import ControlPlane
from kai.kube.client import Kube
from kai.kube.views import timestamp
from kai.kube.watch import Informer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' manifest builders
from support import manifests as m  # noqa: E402

DEPLOY = ROOT / "deploy"
NAMESPACE = "scale"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def create_all(kube: Kube, objects: list[dict], workers: int = 32, post=m.apply) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(lambda obj: post(kube, obj), objects):
            pass


def binding(i: int, gpus_per_node: int) -> dict:
    """The Binding of pod ``job-<i>`` to the node a packing scheduler would choose."""
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"job-{i}", "namespace": NAMESPACE},
            "target": {"apiVersion": "v1", "kind": "Node", "name": f"scale-{i // gpus_per_node}"}}


def post_binding(kube: Kube, body: dict) -> None:
    kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods/{body['metadata']['name']}/binding", body)


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


class Count:
    """Counts the objects of a watched collection that match ``field_selector``; ``reached`` fires at ``target``."""

    def __init__(self, kube: Kube, path: str, target: int, field_selector: str = "",
                 reached: threading.Event | None = None) -> None:
        self.names: set[str] = set()
        self.target = target
        self.reached = reached or threading.Event()
        self.informer = Informer(kube, path, on_event=self._on_event, field_selector=field_selector,
                                 transform=lambda o: {"metadata": {"name": o["metadata"]["name"]}}).start()
        self.informer.wait_synced(30)

    def _on_event(self, kind: str, obj: dict) -> None:
        if kind != "DELETED":
            self.names.add(obj["metadata"]["name"])
            if len(self.names) >= self.target:
                self.reached.set()


def scrape(log: Path) -> dict[tuple[str, tuple], float]:
    """The samples of the ``/metrics`` of the component whose log is ``log``, by (name, sorted labels)."""
    match = re.search(r"serving metrics\S*(?: and probes)? address=(\S+)", log.read_text(errors="replace"))
    if match is None:
        return {}
    with urllib.request.urlopen(f"http://{match.group(1)}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def api_calls(samples: dict[tuple[str, tuple], float]) -> float:
    return sum(v for (name, _), v in samples.items() if name == "kai_api_requests_total")


def writes(samples: dict[tuple[str, tuple], float]) -> dict[str, float]:
    """A component's ``kai_api_requests_total`` other than GETs, by "VERB resource"."""
    counted: dict[str, float] = {}
    for (name, labels), value in samples.items():
        by = dict(labels)
        if name == "kai_api_requests_total" and by.get("verb") != "GET":
            key = f"{by.get('verb')} {by.get('resource', '')}"
            counted[key] = counted.get(key, 0.0) + value
    return counted


def report_costs(pods: int, cpu: dict[str, float], before: dict[str, dict], after: dict[str, dict]) -> None:
    """The scheduler's CPU per placed pod and each component's API calls per pod over the run, and its writes
    per pod by verb and resource."""
    print(f"scheduler CPU per placed pod: {cpu['scheduler'] / pods * 1000:.1f} ms")
    for component in ("scheduler", "binder"):
        calls = api_calls(after[component]) - api_calls(before[component])
        print(f"{component}: {calls:.0f} API calls, {calls / pods:.2f} per pod")
        was = writes(before[component])
        for key, value in sorted(writes(after[component]).items()):
            if value > was.get(key, 0.0):
                print(f"  {key}: {(value - was.get(key, 0.0)) / pods:.2f} per pod")


def cycles(samples: dict[tuple[str, tuple], float], decided: str) -> float:
    """The scheduler's cycles that decided something (``decided`` "true") or not, over every shard."""
    return sum(v for (name, labels), v in samples.items()
               if name == "kai_scheduler_cycles_total" and ("decided", decided) in labels)


class Phases:
    """The scheduler's CPU and cycles while pods stream in (until every pod has its BindRequest or its node) and in
    the tail after it (until every pod runs: the binder's lag)."""

    def __init__(self, procs: dict[str, subprocess.Popen], workdir: Path, t0: float) -> None:
        self.pid, self.log = procs["scheduler"].pid, workdir / "scheduler.log"
        self.marks = [("start", t0, cpu_seconds(self.pid), None)]

    def mark(self, phase: str) -> None:
        """The end of ``phase``: now."""
        self.marks.append((phase, time.monotonic(), cpu_seconds(self.pid), scrape(self.log)))

    def report(self, scraped0: dict) -> None:
        previous = (self.marks[0][1], self.marks[0][2], scraped0["scheduler"])
        for phase, at, cpu, samples in self.marks[1:]:
            seconds, used = at - previous[0], cpu - previous[1]
            deciding = cycles(samples, "true") - cycles(previous[2], "true")
            idle = cycles(samples, "false") - cycles(previous[2], "false")
            n = deciding + idle
            print(f"scheduler, {phase}: {seconds:.1f}s, CPU {used:.1f}s, {n:.0f} cycles ({deciding:.0f} deciding), "
                  f"{used / max(n, 1) * 1000:.0f} ms CPU per cycle")
            previous = (at, cpu, samples)


def settled(workdir: Path, procs: dict[str, subprocess.Popen], quiet: float = 3.0, limit: float = 120.0) -> dict:
    """Each component's samples once its API requests stopped for ``quiet`` seconds (at most ``limit``): the
    reports that trail the binds (pod conditions, events) are counted too; prints how long they trailed."""
    started = time.monotonic()
    last = {c: scrape(workdir / f"{c}.log") for c in procs}
    calm_since = started
    while time.monotonic() - calm_since < quiet and time.monotonic() - started < limit:
        time.sleep(0.5)
        now = {c: scrape(workdir / f"{c}.log") for c in procs}
        if any(api_calls(now[c]) != api_calls(last[c]) for c in procs):
            calm_since = time.monotonic()
        last = now
    print(f"API requests trailing the last Running pod: {max(0.0, calm_since - started):.1f}s")
    return last


class Components:
    """``kai-scheduler run`` processes, one per component, logging into ``workdir``."""

    def __init__(self, kubeconfig: str, workdir: Path, run_args: list[str]) -> None:
        self.kubeconfig, self.workdir, self.run_args = kubeconfig, workdir, run_args
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, *components: str) -> None:
        """Starts ``components`` and returns once each has listed the cluster."""
        for component in components:
            log = open(self.workdir / f"{component}.log", "wb")
            self.procs[component] = subprocess.Popen(
                [sys.executable, "-m", "kai.cli", "run", "--kubeconfig", self.kubeconfig, "--components", component,
                 "--metrics-address=127.0.0.1:0", "--log-level", "INFO", *self.run_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for component in components:
            proc = self.procs[component]
            while f"{component} started" not in (self.workdir / f"{component}.log").read_text(errors="replace"):
                if proc.poll() is not None:
                    raise SystemExit(f"{component} exited with {proc.returncode}; see {self.workdir}/{component}.log")
                time.sleep(0.2)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def run(args: argparse.Namespace, kubeconfig: str, workdir: Path, plane: dict[str, int]) -> float | None:
    """The scale run on ``kubeconfig``; ``plane`` names the control plane's processes (pids) to account CPU for."""
    kube = Kube.connect(kubeconfig, pool_size=64)
    m.install(kube, DEPLOY)
    started = time.monotonic()
    create_all(kube, [m.gpu_node(f"scale-{i}", gpus=args.gpus) for i in range(args.nodes)])
    queues = [f"scale-q{k}" for k in range(args.queues)]
    create_all(kube, [m.queue(q, gpu_quota=args.nodes * args.gpus // args.queues) for q in queues])
    m.apply(kube, m.namespace(NAMESPACE))
    print(f"{args.nodes} nodes, {args.queues} queues created in {time.monotonic() - started:.1f}s", flush=True)

    running = Count(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", args.pods, field_selector="status.phase=Running")
    placed = threading.Event()  # every pod has its BindRequest or, bound by the scheduler itself, its node
    requested = Count(kube, m.collection("BindRequest", NAMESPACE), args.pods, reached=placed)
    bound = Count(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", args.pods, field_selector="spec.nodeName!=",
                  reached=placed)
    objects = []
    for i in range(args.pods):
        name = f"job-{i}"
        objects.append(m.podgroup(NAMESPACE, name, queue=queues[i % len(queues)]))
        objects.append(m.pod(NAMESPACE, name, name, gpus=1))
    components = Components(kubeconfig, workdir, args.run_args)
    try:
        if not (args.staged or args.floor):
            components.start("scheduler", "binder")
        pids = {**plane, **{c: p.pid for c, p in components.procs.items()}, "this benchmark": os.getpid()}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        live = not (args.staged or args.floor)
        scraped0 = {c: scrape(workdir / f"{c}.log") for c in components.procs} if live else {}
        t0 = time.monotonic()
        phases = Phases(components.procs, workdir, t0) if live else None
        create_all(kube, objects)
        print(f"{args.pods} PodGroups and pods created in {time.monotonic() - t0:.1f}s", flush=True)
        if args.floor:  # no scheduler: each pod bound straight to a node, one Binding call per pod
            create_all(kube, [binding(i, args.gpus) for i in range(args.pods)], post=post_binding)
        elif args.staged:  # each component alone on the whole backlog: its own throughput
            components.start("scheduler")
            t1 = time.monotonic()
            placed.wait(args.timeout)
            print(f"scheduler: {len(requested.names)} BindRequests, {len(bound.names)} pods bound "
                  f"{time.monotonic() - t1:.1f}s after it started",
                  flush=True)
            components.start("binder")
            t1 = time.monotonic()
            running.reached.wait(args.timeout)
            print(f"binder: {len(running.names)} pods Running {time.monotonic() - t1:.1f}s after it started")
            for c, p in components.procs.items():
                pids[c], cpu0[c] = p.pid, 0.0
        if phases is not None:
            placed.wait(args.timeout)
            phases.mark("streaming")
        finished = running.reached.wait(args.timeout)
        elapsed = time.monotonic() - t0
        if phases is not None:
            phases.mark("tail")
        print(f"{len(running.names)}/{args.pods} pods Running {elapsed:.1f}s after the first creation"
              + ("" if finished else f" (gave up after {args.timeout:.0f}s)"))
        for component, proc in components.procs.items():
            print(f"{component}: peak RSS {peak_rss_mib(proc.pid):.0f} MiB")
        used = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        print(f"CPU seconds during the run ({os.cpu_count()} cores): "
              + ", ".join(f"{name} {sec:.0f}" for name, sec in sorted(used.items(), key=lambda kv: -kv[1])))
        if live:
            phases.report(scraped0)
            report_costs(args.pods, used, scraped0, settled(workdir, components.procs))
        report_latencies(kube)
        return elapsed if finished else None
    finally:
        components.stop()
        running.informer.stop()
        requested.informer.stop()
        bound.informer.stop()
        print(f"logs in {workdir}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=4000, help="single-GPU pods, one PodGroup each")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--floor", action="store_true",
                   help="no scheduler or binder: bind every pod directly (what the control plane alone needs)")
    p.add_argument("--staged", action="store_true",
                   help="create every object first, then start the scheduler, then the binder: each one's throughput")
    p.add_argument("--kubeconfig", help="use this cluster instead of starting a private control plane")
    p.add_argument("run_args", nargs="*", help="extra arguments of kai-scheduler run (after --)")
    p.add_argument("--versus-floor", action="store_true",
                   help="make the --floor run first (its own control plane) and report the ratio to it")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the private control plane too
    if args.versus_floor:
        if args.kubeconfig or args.floor or args.staged:
            p.error("--versus-floor makes two private runs: not with --kubeconfig, --floor or --staged")
        print("-- floor: the control plane alone", flush=True)
        floor = private_run(argparse.Namespace(**{**vars(args), "floor": True}))
        print("-- scheduler and binder", flush=True)
        elapsed = private_run(args)
        if floor and elapsed:
            print(f"ratio to the floor: {elapsed / floor:.2f} ({elapsed:.1f}s / {floor:.1f}s)")
        return
    if args.kubeconfig:
        run(args, args.kubeconfig, Path(tempfile.mkdtemp(prefix="kai-scale-")), {})
        return
    private_run(args)


def private_run(args: argparse.Namespace) -> float | None:
    """``run`` on a private control plane; the seconds until every pod ran, None if they did not."""
    workdir = Path(tempfile.mkdtemp(prefix="kai-scale-"))
    with ControlPlane(state_dir=workdir / "control-plane") as plane:
        return run(args, str(plane.kubeconfig), workdir, {name: rec.pid for name, rec in plane.processes.items()})


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
