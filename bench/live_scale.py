"""Scale run of ``kai-scheduler run`` on a local control plane: many kwok GPU nodes, thousands of pods.

Run: ``python bench/live_scale.py [--nodes 500] [--gpus 8] [--pods 4000] [--queues 4]
[--scheduler project|kai|kube-scheduler|floor] [--staged] [--shadow] [--kubeconfig FILE] [-- RUN-ARGS]``.

Starts a private control plane (etcd, kube-apiserver, kwok; or uses ``--kubeconfig``), installs
KAI's CRDs, creates the nodes and one queue per group of pods, waits until every node is Ready (on a large
cluster kwok renews the nodes' Leases less often: at most 10 a second), starts the scheduler and the binder
as two processes, then creates the PodGroups and single-GPU pods and prints the time from the
first creation until every pod is Running, the peak RSS of each process and the CPU time each
process (also the control plane's, when private) used meanwhile, the scheduler's CPU per placed pod (and
its CPU and cycles while pods stream in, until every pod has its BindRequest or its node, and in the tail
after it, until every pod runs: how long the binder lags) and each component's API calls (from its
``kai_api_requests_total``) per pod, with its writes by verb and resource, counted once the components'
requests have stopped (the pod conditions and events that report binds trail them; how long is
printed). Every run also prints pods/s, the time from each pod's creation until this benchmark sees it
bound (p50/p99), and the API server's own count of requests per pod by verb and resource
(``apiserver_request_total``, which does not name the client; each component's requests by verb come from
its own metrics). ``--versus-floor`` first makes the floor's run on a control plane of its own and reports
the live run's time as a ratio to it (the issue's target: 2.5x). ``--staged`` creates everything
first and then starts the scheduler (kube-scheduler; the floor's Bindings), then the binder, timing each on the
whole backlog: pods/s from the scheduler's launch until every pod is placed is the scheduler's own rate, not the
rate the pods are created at.
``--scheduler`` picks who places the pods: this project (the default), KAI's own Go components
(``bench/kai_live.py``), kube-scheduler (the pods, plain, with ``schedulerName: default-scheduler`` and no
PodGroups) or the floor: nobody, each pod bound with one Binding call, what the control plane alone needs
for the same pods. ``--shadow`` (with ``--scheduler kai``) also runs ``kai-scheduler run --shadow`` beside
KAI and prints its report, its own API requests by verb and the writes in the API server's audit log (kept
for that run) by client: shadow mode's must be none. ``bench/live_versus.py`` runs them side by side.
Not a test: numbers, no pass/fail. KAI's own figure for 500 nodes x 8 GPUs and 4,000 pods is 6 min 38 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kai.dev.controlplane import NODE_LEASE_SECONDS, ControlPlane, free_ports
from kai.dev.gobuild import ensure_kube_scheduler
from kai.kube.client import Kube
from kai.kube.views import timestamp
from kai.kube.watch import Informer
from kai.scheduler.shadow import SETTLE as SHADOW_SETTLE

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' manifest builders
from support import manifests as m  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import kai_live  # noqa: E402
from kai_live import KaiComponents, Processes  # noqa: E402

DEPLOY = ROOT / "deploy"
NAMESPACE = "scale"
SCHEDULERS = ("project", "kai", "kube-scheduler", "floor")
#: The API server's audit policy of a ``--shadow`` run: who wrote what (but kwok's Lease renewals).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "None", "verbs": ["get", "list", "watch"]},
                          {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
                          {"level": "Metadata"}]}
#: The verbs of the API server's ``apiserver_request_total`` that read.
READS = ("GET", "LIST", "WATCH", "WATCHLIST")


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
    pool = ThreadPoolExecutor(workers)
    try:
        for _ in pool.map(lambda obj: post(kube, obj), objects):
            pass
    finally:  # stopped (SIGTERM): what is not under way yet is not created
        pool.shutdown(wait=False, cancel_futures=True)


def wait_nodes_ready(kube: Kube, count: int, timeout: float) -> None:
    """Until ``count`` nodes are Ready without taints (kwok made them Ready and renews their Leases, the node-lifecycle
    controller lifted its taints): so that no node is still being set up while the pods come."""
    started = time.monotonic()
    while True:
        nodes = kube.get("/api/v1/nodes").get("items", [])
        ready = sum(not n["spec"].get("taints") and any(c["type"] == "Ready" and c["status"] == "True"
                                                        for c in n.get("status", {}).get("conditions", []))
                    for n in nodes)
        if ready >= count or time.monotonic() - started > timeout:
            print(f"{ready}/{count} nodes Ready without taints {time.monotonic() - started:.1f}s after their creation",
                  flush=True)
            return
        time.sleep(2.0)


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
    """Counts the objects of a watched collection that match ``field_selector`` (and when each was first seen);
    ``reached`` fires at ``target``."""

    def __init__(self, kube: Kube, path: str, target: int, field_selector: str = "",
                 reached: threading.Event | None = None) -> None:
        self.names: dict[str, float] = {}  # when each was first seen (time.monotonic())
        self.target = target
        self.reached = reached or threading.Event()
        self.informer = Informer(kube, path, on_event=self._on_event, field_selector=field_selector,
                                 transform=lambda o: {"metadata": {"name": o["metadata"]["name"]}}).start()
        self.informer.wait_synced(30)

    def _on_event(self, kind: str, obj: dict) -> None:
        if kind != "DELETED":
            self.names.setdefault(obj["metadata"]["name"], time.monotonic())
            if len(self.names) >= self.target:
                self.reached.set()


def metrics_url(log: Path) -> str | None:
    """The ``/metrics`` URL of the component whose log is ``log`` (None before it serves them)."""
    match = re.search(r"serving metrics\S*(?: and probes)? address=(\S+)", log.read_text(errors="replace"))
    return None if match is None else f"http://{match.group(1)}/metrics"


def scrape(log: Path) -> dict[tuple[str, tuple], float]:
    """The samples of the ``/metrics`` of the component whose log is ``log``, by (name, sorted labels)."""
    url = metrics_url(log)
    return {} if url is None else samples(url)


def fetch(url: str) -> str:
    """The body at ``url``; an HTTPS endpoint's certificate is not checked."""
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    with urllib.request.urlopen(url, timeout=10, context=context) as resp:
        return resp.read().decode()


def samples(url: str) -> dict[tuple[str, tuple], float]:
    """The samples of the metrics served at ``url``, by (name, sorted labels)."""
    text = fetch(url)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def by_verb(url: str) -> dict[str, float]:
    """A component's API requests by verb: ``kai_api_requests_total`` of this project's, client-go's
    ``rest_client_requests_total`` of the Go components'."""
    counts: dict[str, float] = {}
    for (name, labels), value in samples(url).items():
        if name in ("kai_api_requests_total", "rest_client_requests_total"):
            verb = dict(labels).get("verb") or dict(labels).get("method", "?")
            counts[verb] = counts.get(verb, 0.0) + value
    return counts


def apiserver_requests(kube: Kube) -> dict[tuple[str, str], float]:
    """The API server's own count of the requests it served (``apiserver_request_total``), by verb and
    resource (``resource/subresource``); it does not say which client sent them."""
    with kube.stream("/metrics", {}, 30) as resp:
        text = resp.read().decode()
    counts: dict[tuple[str, str], float] = {}
    lines = "\n".join(line for line in text.splitlines() if line.startswith("apiserver_request_total{"))
    for family in text_string_to_metric_families(lines):
        for sample in family.samples:
            sub = sample.labels.get("subresource")
            key = (sample.labels["verb"], sample.labels.get("resource", "") + (f"/{sub}" if sub else ""))
            counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def writes(counts: dict[tuple[str, str], float]) -> float:
    """The writes among the API server's ``counts``, but for Leases and Nodes (kwok's heartbeats never stop)."""
    return sum(v for (verb, resource), v in counts.items()
               if verb not in READS and resource.split("/")[0] not in ("leases", "nodes"))


def api_calls(samples: dict[tuple[str, tuple], float]) -> float:
    return sum(v for (name, _), v in samples.items() if name == "kai_api_requests_total")


def component_writes(samples: dict[tuple[str, tuple], float]) -> dict[str, float]:
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
        was = component_writes(before[component])
        for key, value in sorted(component_writes(after[component]).items()):
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


def settled(kube: Kube, quiet: float = 3.0, limit: float = 120.0) -> dict[tuple[str, str], float]:
    """The API server's request counts once its writes (but kwok's heartbeats) stopped for ``quiet`` seconds (at
    most ``limit``): the reports that trail the binds (pod conditions, events) are counted too; prints how long
    they trailed."""
    started = time.monotonic()
    last = apiserver_requests(kube)
    calm_since = started
    while time.monotonic() - calm_since < quiet and time.monotonic() - started < limit:
        time.sleep(1.0)
        now = apiserver_requests(kube)
        if writes(now) != writes(last):
            calm_since = time.monotonic()
        last = now
    print(f"API writes trailing the last Running pod: {max(0.0, calm_since - started):.1f}s")
    return last


def report_requests(pods: int, before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict:
    """The API server's requests per pod over the run, by verb and resource (those of at least 0.01 per pod)."""
    per_pod = {key: (after.get(key, 0.0) - before.get(key, 0.0)) / pods for key in after}
    per_pod = {key: v for key, v in sorted(per_pod.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    total = sum(v for (verb, _), v in per_pod.items())
    written = sum(v for (verb, _), v in per_pod.items() if verb not in READS)
    print(f"API server requests per pod (apiserver_request_total; every client): {total:.2f}, {written:.2f} writes: "
          + ", ".join(f"{verb} {resource} {v:.2f}" for (verb, resource), v in per_pod.items()))
    return {f"{verb} {resource}": round(v, 3) for (verb, resource), v in per_pod.items()}


def report_binding(created: dict[str, float], bound: dict[str, float]) -> tuple[float, float]:
    """p50 and p99 seconds from each pod's creation until this benchmark saw it bound."""
    waits = sorted(bound[name] - created[name] for name in bound if name in created)
    if not waits:
        return float("nan"), float("nan")
    pick = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))]  # noqa: E731
    print(f"pod creation -> bound (as watched here): p50 {pick(0.5):.2f}s, p99 {pick(0.99):.2f}s, "
          f"max {waits[-1]:.2f}s over {len(waits)} pods")
    return pick(0.5), pick(0.99)


class Components(Processes):
    """``kai-scheduler run`` processes, one per component, logging into ``workdir``."""

    def __init__(self, kubeconfig: str, workdir: Path, run_args: list[str]) -> None:
        super().__init__()
        self.kubeconfig, self.workdir, self.run_args = kubeconfig, workdir, run_args

    def start(self, *components: str) -> None:
        """Starts ``components`` and returns once each has listed the cluster."""
        for component in components:
            log = open(self.workdir / f"{component}.log", "wb")
            self.procs[component] = subprocess.Popen(
                [sys.executable, "-m", "kai.cli", "run", "--kubeconfig", self.kubeconfig, "--components", component,
                 "--metrics-address=127.0.0.1:0", "--log-level", "INFO", *self.run_args],
                # not started in a source checkout, whose ``kai`` folder would stand in for the installed package
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir)
        for component in components:
            proc = self.procs[component]
            while f"{component} started" not in (self.workdir / f"{component}.log").read_text(errors="replace"):
                if proc.poll() is not None:
                    raise SystemExit(f"{component} exited with {proc.returncode}; see {self.workdir}/{component}.log")
                time.sleep(0.2)
            url = metrics_url(self.workdir / f"{component}.log")
            if url:
                self.metrics[component] = url


class KubeScheduler(Processes):
    """kube-scheduler with its defaults but for leader election, its health and metrics open to anyone on a
    loopback port."""

    def __init__(self, kubeconfig: str, workdir: Path) -> None:
        super().__init__()
        self.kubeconfig, self.workdir = kubeconfig, workdir

    def start(self, timeout: float = 60.0) -> None:
        (port,) = free_ports(1)
        with open(self.workdir / "kube-scheduler.log", "wb") as log:
            self.procs["kube-scheduler"] = subprocess.Popen(
                [str(ensure_kube_scheduler()), f"--kubeconfig={self.kubeconfig}", "--leader-elect=false",
                 "--bind-address=127.0.0.1", f"--secure-port={port}", "--authentication-skip-lookup=true",
                 "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.metrics["kube-scheduler"] = f"https://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + timeout
        while True:
            try:
                fetch(f"https://127.0.0.1:{port}/readyz")
                return
            except OSError:
                if self.procs["kube-scheduler"].poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"kube-scheduler did not start; see {self.workdir}/kube-scheduler.log") from None
                time.sleep(0.2)


def start(args: argparse.Namespace, kubeconfig: str, workdir: Path) -> Processes:
    """The scheduler's processes, started (none for the floor, nor yet when ``--staged``)."""
    if args.scheduler == "kai":
        kai = KaiComponents(kubeconfig, workdir, kai_live.build())
        kai.start()
        return kai
    if args.scheduler == "kube-scheduler":
        kube_scheduler = KubeScheduler(kubeconfig, workdir)
        if not args.staged:
            kube_scheduler.start()
        return kube_scheduler
    components = Components(kubeconfig, workdir, args.run_args)
    if args.scheduler == "project" and not args.staged:
        components.start("scheduler", "binder")
    return components


def run(args: argparse.Namespace, kubeconfig: str, workdir: Path, plane: dict[str, int]) -> dict | None:
    """The scale run on ``kubeconfig``; ``plane`` names the control plane's processes (pids) to account CPU for.
    Returns what it measured (None when not every pod ran)."""
    kube = Kube.connect(kubeconfig, pool_size=64)
    project_client = kube.api_client.user_agent.split(" ")[0]  # this project's components' (the shadow scheduler's)
    kube.api_client.user_agent = "live-scale"  # its writes are told apart from the components' in the audit log
    m.install(kube, DEPLOY)
    started = time.monotonic()
    create_all(kube, [m.gpu_node(f"scale-{i}", gpus=args.gpus) for i in range(args.nodes)])
    queues = [f"scale-q{k}" for k in range(args.queues)]
    create_all(kube, [m.queue(q, gpu_quota=args.nodes * args.gpus // args.queues) for q in queues])
    m.apply(kube, m.namespace(NAMESPACE))
    print(f"{args.nodes} nodes, {args.queues} queues created in {time.monotonic() - started:.1f}s", flush=True)
    wait_nodes_ready(kube, args.nodes, args.timeout)

    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    running = Count(kube, pods, args.pods, field_selector="status.phase=Running")
    placed = threading.Event()  # every pod has its BindRequest or, bound by the scheduler itself, its node
    bound = Count(kube, pods, args.pods, field_selector="spec.nodeName!=", reached=placed)
    requested = Count(kube, m.collection("BindRequest", NAMESPACE), args.pods, reached=placed)
    objects = []
    for i in range(args.pods):
        name = f"job-{i}"
        if args.scheduler == "kube-scheduler":  # plain pods
            objects.append(m.pod(NAMESPACE, name, gpus=1, scheduler_name="default-scheduler"))
        else:
            objects.append(m.podgroup(NAMESPACE, name, queue=queues[i % len(queues)]))
            objects.append(m.pod(NAMESPACE, name, name, gpus=1))
    created: dict[str, float] = {}

    def create(kube: Kube, obj: dict) -> None:
        m.apply(kube, obj)
        if obj["kind"] == "Pod":
            created[obj["metadata"]["name"]] = time.monotonic()

    components = start(args, kubeconfig, workdir)
    shadow = Components(kubeconfig, workdir / "shadow", ["--shadow", "--shadow-report", str(workdir / "shadow.json"),
                                                         *args.run_args])
    try:
        if args.shadow:
            shadow.workdir.mkdir()
            shadow.start("scheduler")
            divergences = Divergences(workdir / "shadow.json")
        live = args.scheduler == "project" and not args.staged
        pids = {**plane, **{c: p.pid for c, p in components.procs.items()}, "this benchmark": os.getpid(),
                **({"shadow scheduler": shadow.procs["scheduler"].pid} if args.shadow else {})}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        scraped0 = {c: scrape(workdir / f"{c}.log") for c in components.procs} if live else {}
        requests0 = apiserver_requests(kube)
        t0 = time.monotonic()
        phases = Phases(components.procs, workdir, t0) if live else None
        create_all(kube, objects, post=create)
        print(f"{args.pods} pods created in {time.monotonic() - t0:.1f}s", flush=True)
        own: float | None = None  # seconds from the scheduler's launch until every pod was placed (--staged)
        if args.scheduler == "floor":  # no scheduler: each pod bound straight to a node, one Binding call per pod
            launched = time.monotonic()
            create_all(kube, [binding(i, args.gpus) for i in range(args.pods)], post=post_binding)
            if args.staged:
                placed.wait(args.timeout)
                own = time.monotonic() - launched
        elif args.staged:  # the scheduler alone on the whole backlog: its own throughput
            launched = time.monotonic()
            if isinstance(components, KubeScheduler):
                components.start()
            else:
                components.start("scheduler")
            placed.wait(args.timeout)
            own = time.monotonic() - launched
            print(f"{args.scheduler}: {len(requested.names)} BindRequests, {len(bound.names)} pods bound "
                  f"{own:.1f}s after it was launched", flush=True)
            if isinstance(components, Components):
                components.start("binder")
                t1 = time.monotonic()
                running.reached.wait(args.timeout)
                print(f"binder: {len(running.names)} pods Running {time.monotonic() - t1:.1f}s after it started")
            for c, p in components.procs.items():
                pids[c], cpu0[c] = p.pid, 0.0
        if own is not None:
            print(f"{args.scheduler}: every pod placed {own:.1f}s after the scheduler's launch (the floor: after its "
                  f"first Binding), {args.pods / own:.0f} pods/s: its own rate")
        if phases is not None:
            placed.wait(args.timeout)
            phases.mark("streaming")
        finished = running.reached.wait(args.timeout)
        elapsed = time.monotonic() - t0
        if phases is not None:
            phases.mark("tail")
        print(f"{args.scheduler}: {len(running.names)}/{args.pods} pods Running {elapsed:.1f}s after the first "
              f"creation, {len(running.names) / elapsed:.0f} pods/s"
              + ("" if finished else f" (gave up after {args.timeout:.0f}s)"))
        rss = {name: peak_rss_mib(proc.pid) for name, proc in components.procs.items()}
        rss.update({f"shadow {name}": peak_rss_mib(proc.pid) for name, proc in shadow.procs.items()})
        print("peak RSS (MiB): " + ", ".join(f"{name} {mib:.0f}" for name, mib in rss.items()))
        used = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        print(f"CPU seconds during the run ({os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}): "
              + ", ".join(f"{name} {sec:.0f}" for name, sec in sorted(used.items(), key=lambda kv: -kv[1])))
        if phases is not None:
            phases.report(scraped0)
        p50, p99 = report_binding(created, bound.names)
        requests = report_requests(args.pods, requests0, settled(kube))
        if live:
            report_costs(args.pods, used, scraped0, {c: scrape(workdir / f"{c}.log") for c in components.procs})
        clients = {name: by_verb(url) for name, url in components.metrics.items()}
        for name, verbs in clients.items():
            print(f"{name}: API requests by verb (its own count) "
                  + (", ".join(f"{verb} {n:.0f}" for verb, n in sorted(verbs.items())) or "not exported"))
        if args.shadow:
            report_shadow(divergences.stop(), kube, by_verb(shadow.metrics["scheduler"]))
            report_audit(workdir / "audit.log", project_client)
        report_latencies(kube)
        return {"elapsed": elapsed, "pods_per_s": args.pods / elapsed, "p50": p50, "p99": p99, "own": own,
                "requests": requests, "cpu": used, "rss": rss, "load": os.getloadavg()} if finished else None
    finally:
        shadow.stop()
        components.stop()
        for informer in (running, bound, requested):
            informer.informer.stop()
        print(f"logs in {workdir}")


class Divergences:
    """Every divergence shadow mode reported during the run: its report file, which keeps only the latest, read
    every second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report: dict = {}
        self.seen: dict[tuple, dict] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        while not self.done.wait(1.0):
            self._read()

    def _read(self) -> None:
        try:
            self.report = json.loads(self.path.read_text())
        except (OSError, ValueError):  # not written yet
            return
        for d in self.report["divergences"]:
            self.seen[(d["time"], d["pod"], d["outcome"])] = d

    def stop(self) -> dict:
        """The last report, its divergences all of those seen, in order."""
        self.done.set()
        self.thread.join()
        self._read()
        return {**self.report, "divergences": [self.seen[k] for k in sorted(self.seen)]}


def report_shadow(report: dict, kube: Kube, verbs: dict[str, float]) -> None:
    """Shadow mode's outcome counts, every divergence it reported (with the node KAI bound the pod to in the
    end), and its own API requests: reads only."""
    nodes = {f"{NAMESPACE}/{p['metadata']['name']}": p["spec"].get("nodeName")
             for p in kube.get(m.collection("Pod", NAMESPACE)).get("items", [])}
    divergences = report.get("divergences", [])
    print(f"shadow: {report.get('cycles', 0)} cycles, outcomes {report.get('outcomes', {})}, "
          f"{report.get('awaiting_kai', 0)} awaiting KAI, {len(divergences)} divergences:")
    for d in divergences:
        print(f"  {d['pod']}: {d['outcome']} (here {d['here']}, KAI then {d['kai']}, KAI in the end "
              f"{nodes.get(d['pod'])})" + (f"; here: {d['why_here']}" if d.get("why_here") else "")
              + (f"; KAI: {d['why_kai']}" if d.get("why_kai") else ""))
    latest = {d["pod"]: d for d in divergences}
    late = sum(d["outcome"] == "bound here only" and d["here"] == nodes.get(pod) for pod, d in latest.items())
    print(f"shadow: {len(latest)} pods diverged; of them {late} 'bound here only' on the node KAI bound them "
          f"to later (after shadow mode's {SHADOW_SETTLE:.0f} s)")
    written = {verb: n for verb, n in verbs.items() if verb.lower() not in ("get", "list", "watch")}
    print(f"shadow: its own API requests {dict(sorted(verbs.items()))}: "
          + (f"WRITES {written}" if written else "no writes"))


def report_audit(path: Path, shadow_client: str) -> None:
    """The writes in the API server's audit log (``--shadow`` runs) by client (User-Agent header), verb and resource;
    those of the shadow scheduler (the only one of this project's components in the run) are counted apart."""
    if not path.exists():
        return
    time.sleep(2)  # the batch backend flushes every second
    counts: dict[tuple[str, str, str], int] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef", {})
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (event.get("userAgent", "?").split(" ")[0], event["verb"], resource)
        counts[key] = counts.get(key, 0) + 1
    print("API server's audit log, writes by client, verb and resource: "
          + ", ".join(f"{client} {verb} {resource} {n}" for (client, verb, resource), n in sorted(counts.items())))
    print(f"shadow: writes in the API server's audit log ({shadow_client}): "
          f"{sum(n for (client, _, _), n in counts.items() if client == shadow_client)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=4000, help="single-GPU pods, one PodGroup each")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--scheduler", choices=SCHEDULERS, default="project",
                   help="who places the pods: this project, KAI's Go components, kube-scheduler (plain pods) or "
                        "nobody (the floor: every pod bound directly, what the control plane alone needs)")
    p.add_argument("--staged", action="store_true",
                   help="create every object first, then start the scheduler, then the binder: each one's throughput")
    p.add_argument("--shadow", action="store_true",
                   help="with --scheduler kai: also run kai-scheduler run --shadow beside KAI and print its report")
    p.add_argument("--kubeconfig", help="use this cluster instead of starting a private control plane")
    p.add_argument("run_args", nargs="*", help="extra arguments of kai-scheduler run (after --)")
    p.add_argument("--versus-floor", action="store_true",
                   help="make the floor's run first (its own control plane) and report the ratio to it")
    args = p.parse_args()
    if args.staged and args.scheduler == "kai":
        p.error("--staged starts this project's scheduler (then its binder), kube-scheduler or the floor's Bindings")
    if args.shadow and args.scheduler != "kai":
        p.error("--shadow runs beside KAI: --scheduler kai")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the private control plane too
    if args.versus_floor:
        if args.kubeconfig or args.scheduler == "floor" or args.staged:
            p.error("--versus-floor makes two private runs: not with --kubeconfig, --scheduler floor or --staged")
        print("-- floor: the control plane alone", flush=True)
        floor = private_run(argparse.Namespace(**{**vars(args), "scheduler": "floor", "shadow": False}))
        print(f"-- {args.scheduler}", flush=True)
        result = private_run(args)
        if floor and result:
            print(f"ratio to the floor: {result['elapsed'] / floor['elapsed']:.2f} "
                  f"({result['elapsed']:.1f}s / {floor['elapsed']:.1f}s)")
        return
    if args.kubeconfig:
        run(args, args.kubeconfig, Path(tempfile.mkdtemp(prefix="kai-scale-")), {})
        return
    private_run(args)


def private_run(args: argparse.Namespace) -> dict | None:
    """``run`` on a private control plane (with ``--shadow``, one that keeps an audit log of the writes)."""
    workdir = Path(tempfile.mkdtemp(prefix="kai-scale-"))
    audit: tuple[str, ...] = ()
    if args.shadow:
        (workdir / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        audit = (f"--audit-policy-file={workdir / 'audit-policy.json'}", f"--audit-log-path={workdir / 'audit.log'}",
                 "--audit-log-format=json", "--audit-log-mode=batch", "--audit-log-maxsize=0")
    # kwok renews every node's Lease each quarter of its duration: at most 10 renewals a second on large clusters
    lease = max(NODE_LEASE_SECONDS, args.nodes * 2 // 5)
    with ControlPlane(state_dir=workdir / "control-plane", apiserver_args=audit, node_lease_seconds=lease) as plane:
        return run(args, str(plane.kubeconfig), workdir, {name: rec.pid for name, rec in plane.processes.items()})


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
