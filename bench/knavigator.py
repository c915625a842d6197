"""NVIDIA knavigator's scaling and gang-scheduling benchmarks, driven by knavigator, against this project or KAI.

Run: ``python bench/knavigator.py [--knavigator BINARY] [--knavigator-source DIR] [--benchmark NAME ...]
[--scheduler project|project-backfill|kai ...] [--gangs] [--repeat N] [--until running|finished] [--json FILE]
[--if-available] [-- RUN-ARGS]``.

knavigator (``NVIDIA/knavigator``) is not part of this project: give a knavigator binary (``--knavigator``,
default ``knavigator`` on the PATH) and a checkout of its repository (``--knavigator-source``, default
``$KNAVIGATOR_SOURCE``), whose ``resources/`` folder holds the benchmarks' workflows and templates.

Each run gets a private control plane on which kwok keeps pods running until they are deleted,
or completes them after the delay that knavigator's job templates ask for (:mod:`kai.dev.kwokstages`).
KAI's CRDs, default queues and priority classes are installed, and the nodes of the benchmark's
``config-nodes.yaml`` are created here, in the shapes of knavigator's ``virtual-nodes`` chart
(knavigator's own ``Configure`` task installs that chart with helm from the internet). Then the scheduler's
components start and knavigator runs the remaining workflows (``config-kai.yaml`` and the test).
``--scheduler`` picks them, several one after the other (alternating over ``--repeat``):

* ``project``: ``kai-scheduler run``'s scheduler, binder, podgrouper and status controllers, one process each
  as the chart deploys them, with their defaults;
* ``project-backfill``: the same with the reservation policy on (a configuration of ``reservation: {enabled:
  true}``, its defaults otherwise) and each Job declaring its maximum runtime, its pods' ``ttl`` (how long kwok
  runs them) plus ``--runtime-margin`` (default :data:`RUNTIME_MARGIN`). A Job's runtime counts from its start,
  so that is its pods' only when they all start together: it needs ``--gangs``;
* ``kai``: KAI's own scheduler, binder, podgrouper, queue and podgroup controllers built from its source at
  the pinned commit, as ``bench/live_scale.py --scheduler kai`` runs them (``bench/kai_live.py``).

knavigator's KAI Job template carries no ``kai.scheduler/batch-min-member``, so KAI's podgrouper (and this
project's) makes each Job a PodGroup of minimum 1: its pods are placed one by one. ``--gangs`` makes every Job a
gang of all its pods, for every scheduler of the run. With ``--gangs`` or ``project-backfill`` knavigator runs
copies of ``config-kai.yaml`` and the test workflow, written into the run's folder, which differ from its own only
in that they register a copy of the Job template with the annotations ``kai.scheduler/batch-min-member:
"{{.replicas}}"`` (``--gangs``) and ``kai.scheduler/max-runtime: "{{.maxRuntime}}"`` (``project-backfill``) on the
Job, and that each test task submitting it gets the parameter ``maxRuntime`` (``project-backfill``).

Prints the seconds from knavigator's start until the Job controller made every pod of the workflow's Jobs
(the control plane's share: kube-controller-manager creates pods at its default 20 requests/s), until every pod
ran and until every Job finished, pods/s, the nodes' average GPU occupancy over that time (the GPUs of the bound,
unfinished pods, sampled every second) and each process's CPU seconds; then, per benchmark, every run's figures
side by side and the ratio of each scheduler's mean to KAI's. Not a test: numbers, no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

from kai.api.names import BATCH_MIN_MEMBER_ANNOTATION, MAX_RUNTIME_ANNOTATION
from kai.common.durations import parse_duration
from kai.dev.controlplane import ControlPlane
from kai.dev.gobuild import ControlPlaneError
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.watch import Informer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' manifest builders
from support import manifests as m  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import kai_live  # noqa: E402
from kai_live import KaiComponents, Processes  # noqa: E402
from live_scale import Components, cpu_seconds, create_all  # noqa: E402

DEPLOY = ROOT / "deploy"
#: The namespace knavigator's KAI job templates create their Jobs in.
NAMESPACE = "default"
GPU = "nvidia.com/gpu"
#: ``kai-scheduler run``'s components as the chart deploys them, each a process; not the admission webhook,
#: which the API server is not told of here.
COMPONENTS = ("scheduler", "binder", "podgrouper", "podgroup-controller", "queue-controller")
SCHEDULERS = ("project", "project-backfill", "kai")
#: knavigator's KAI Job template, which ``project-backfill`` runs a copy of with a declared maximum runtime.
JOB_TEMPLATE = "resources/benchmarks/templates/kai/job.yaml"
#: Seconds a Job's declared maximum runtime exceeds the ``ttl`` its pods run (``project-backfill``, by default): the
#: runtime counts from the scheduler's placement, the pods complete ``ttl`` after kwok made them Running, and on a
#: loaded dev cluster (a load average of 20 on 2 cores) that took more than 30 s.
RUNTIME_MARGIN = 60.0


@dataclass(frozen=True)
class Benchmark:
    """A knavigator benchmark: its workflow folder and the workflows knavigator runs once the nodes exist."""

    folder: str
    workflows: tuple[str, ...]
    nodes: str = "config-nodes.yaml"


_SCALING, _GANG = "resources/benchmarks/scaling/workflows", "resources/benchmarks/gang-scheduling/workflows"
BENCHMARKS = {
    "scaling-multi": Benchmark(_SCALING, ("config-kai.yaml", "run-test-multi.yaml")),
    "scaling-single": Benchmark(_SCALING, ("config-kai.yaml", "run-test-single.yaml")),
    "gang-scheduling": Benchmark(_GANG, ("config-kai.yaml", "run-test.yaml")),
}

# -- the nodes of knavigator's virtual-nodes chart --------------------------------------------------------

#: Capacity of the chart's node types (DGX A100 40 GB and 80 GB, DGX H100), besides :data:`_EVERY_NODE`.
NODE_TYPES = {
    "dgxa100.40g": {"cpu": "256", "memory": "1Ti", GPU: "8", "nvidia.com/mlnxnics": "16", "ephemeral-storage": "15Ti"},
    "dgxa100.80g": {"cpu": "256", "memory": "2Ti", GPU: "8", "nvidia.com/mlnxnics": "16", "ephemeral-storage": "30Ti"},
    "dgxh100.80g": {"cpu": "224", "memory": "2Ti", GPU: "8", "nvidia.com/mlnxnics": "16", "ephemeral-storage": "30Ti"},
}
_EVERY_NODE = {"hugepages-1Gi": "0", "hugepages-2Mi": "0", "pods": "110"}
_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def virtual_node(spec: dict, suffix: str) -> dict:
    """The Node ``virtual-<type>-<suffix>`` of one entry of a ``Configure`` task's ``nodes``, as the chart makes it:
    a kwok node with the type's capacity, the entry's labels and annotations over the chart's, and its conditions
    after the chart's."""
    kind = spec["type"]
    if kind not in NODE_TYPES:
        raise ValueError(f"node type {kind!r} is not one of the chart's: {', '.join(NODE_TYPES)}")
    name = f"virtual-{kind}-{suffix}"
    resources = {**_EVERY_NODE, **NODE_TYPES[kind]}
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/role": "agent",
              "node-role.kubernetes.io/agent": "", **{k: str(v) for k, v in (spec.get("labels") or {}).items()},
              "type": "kwok"}
    annotations = {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake",
                   **{k: str(v) for k, v in (spec.get("annotations") or {}).items()}}
    conditions = [{"type": t, "status": s, "reason": r, "message": msg} for t, s, r, msg in _CONDITIONS]
    conditions += [{**c, "status": str(c["status"])} for c in spec.get("conditions") or ()]
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {"conditions": conditions, "allocatable": resources, "capacity": dict(resources), "phase": "Running",
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake",
                                "kubeProxyVersion": "fake"}},
    }


def configured_nodes(workflow: dict, seed: int = 0) -> list[dict]:
    """The Nodes the ``Configure`` tasks of a knavigator workflow ask for, named with random suffixes as the chart
    names them (from ``seed``: the same names every run). Only node parameters are understood."""
    rng = random.Random(seed)
    suffixes: set[str] = set()
    nodes = []
    for task in workflow.get("tasks") or ():
        if task.get("type") != "Configure":
            raise ValueError(f"task {task.get('id')!r} is a {task.get('type')}, not a Configure task")
        unknown = set(task.get("params") or {}) - {"nodes", "timeout"}
        if unknown:
            raise ValueError(f"task {task.get('id')!r}: only its nodes can be configured here, not {sorted(unknown)}")
        for spec in task["params"].get("nodes") or ():
            for _ in range(int(spec["count"])):
                while (suffix := "".join(rng.choices(string.ascii_lowercase + string.digits, k=6))) in suffixes:
                    pass
                suffixes.add(suffix)
                nodes.append(virtual_node(spec, suffix))
    return nodes


def reduced_crd(group: str, version: str, kind: str, plural: str) -> dict:
    """A CRD of ``kind`` that keeps whatever is written: knavigator's KAI workflows register the MPIJob template
    of the Kubeflow MPI operator, and registering needs the kind to be served (no MPIJob is made here)."""
    keep = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True, "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "properties": {"spec": keep, "status": keep}}}}]}}


MPIJOB_CRD = reduced_crd("kubeflow.org", "v2beta1", "MPIJob", "mpijobs")

# -- adjusted copies of the workflows (--gangs, project-backfill) -------------------------------------------

#: What ``--gangs`` annotates the Job with: all its pods are one gang (KAI's podgrouper reads it; its default is 1).
GANG = {BATCH_MIN_MEMBER_ANNOTATION: "{{.replicas}}"}
#: What ``project-backfill`` annotates the Job with: its maximum runtime, a parameter of the test's tasks.
RUNTIME = {MAX_RUNTIME_ANNOTATION: "{{.maxRuntime}}"}


def annotated(template: str, annotations: dict[str, str]) -> str:
    """knavigator's Job template with ``annotations`` (quoted values, which may be template actions) on the Job: its
    first document's top-level ``metadata``, which must have no annotations yet."""
    lines = template.splitlines(keepends=True)
    try:
        at = next(i for i, line in enumerate(lines) if line.rstrip() == "metadata:")
    except StopIteration:
        raise ValueError("the Job template has no top-level metadata") from None
    for line in lines[at + 1:]:
        if line.strip() and not line.startswith(" "):
            break
        if line.startswith("  annotations:"):
            raise ValueError("the Job template's metadata has annotations already")
    added = "".join(f'    {key}: "{value}"\n' for key, value in annotations.items())
    return "".join(lines[:at + 1]) + "  annotations:\n" + added + "".join(lines[at + 1:])


def max_runtime(ttl: object, margin: float = RUNTIME_MARGIN) -> str:
    """The maximum runtime a Job whose pods run ``ttl`` declares: ``margin`` seconds more, a Go duration."""
    return f"{parse_duration(ttl, 'ttl') + margin:g}s"


def registering(config: dict, template: str) -> tuple[dict, set[str]]:
    """``config`` (a workflow) registering ``template`` in place of knavigator's Job template, and the ids of the
    tasks that register it."""
    tasks, ids = [], set()
    for task in config.get("tasks") or ():
        params = task.get("params") or {}
        if task.get("type") == "RegisterObj" and params.get("template") == JOB_TEMPLATE:
            task = {**task, "params": {**params, "template": template}}
            ids.add(task["id"])
        tasks.append(task)
    if not ids:
        raise ValueError(f"the workflow registers no {JOB_TEMPLATE}")
    return {**config, "tasks": tasks}, ids


def declaring_runtimes(test: dict, registered: set[str], margin: float = RUNTIME_MARGIN) -> dict:
    """``test`` (a workflow) with a ``maxRuntime`` parameter on every task that submits a Job of ``registered``
    (from its ``ttl``)."""
    tasks = []
    for task in test.get("tasks") or ():
        params = task.get("params") or {}
        if task.get("type") == "SubmitObj" and params.get("refTaskId") in registered:
            values = params.get("params") or {}
            if "ttl" not in values:
                raise ValueError(f"task {task.get('id')!r} submits Jobs without a ttl: no runtime to declare")
            declared = max_runtime(values["ttl"], margin)
            task = {**task, "params": {**params, "params": {**values, "maxRuntime": declared}}}
        tasks.append(task)
    return {**test, "tasks": tasks}


def adjusted_workflows(folder: Path, bench: Benchmark, source: Path, workdir: Path, gangs: bool,
                       margin: float | None) -> list[Path]:
    """Copies of the benchmark's workflows, written into ``workdir``, whose Jobs are gangs of all their pods
    (``gangs``) and declare their maximum runtime, ``margin`` seconds above their pods' ``ttl`` (unless None)."""
    runtimes = margin is not None
    template = workdir / "job.yaml"
    template.write_text(annotated((source / JOB_TEMPLATE).read_text(),
                                  {**(GANG if gangs else {}), **(RUNTIME if runtimes else {})}))
    config, *tests = bench.workflows
    workflow, ids = registering(yaml.safe_load((folder / config).read_text()), str(template))
    paths = [workdir / config]
    paths[0].write_text(yaml.safe_dump(workflow, sort_keys=False))
    for test in tests:
        paths.append(workdir / test)
        if runtimes:
            paths[-1].write_text(yaml.safe_dump(declaring_runtimes(yaml.safe_load((folder / test).read_text()), ids,
                                                                   margin), sort_keys=False))
        else:
            shutil.copyfile(folder / test, paths[-1])
    return paths


# -- watching the run -------------------------------------------------------------------------------------


def pod_gpus(pod: dict) -> int:
    """The whole GPUs a pod's containers ask for."""
    total = 0
    for container in pod.get("spec", {}).get("containers") or ():
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get(GPU, (resources.get("limits") or {}).get(GPU, 0))
        total += int(float(amount))
    return total


class PodView(NamedTuple):
    uid: str
    node: str
    phase: str
    gpus: int


def slim_pod(pod: dict) -> PodView:
    return PodView(pod["metadata"]["uid"], pod.get("spec", {}).get("nodeName", ""),
                   pod.get("status", {}).get("phase", ""), pod_gpus(pod))


def slim_job(job: dict) -> tuple[int, bool]:
    """(completions, finished) of a Job: finished once Complete or Failed."""
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in job.get("status", {}).get("conditions") or ())
    return int(job.get("spec", {}).get("completions") or 1), finished


def occupancy(pods: list[PodView], capacity: dict[str, int]) -> float:
    """The fraction of the nodes' GPUs that bound, unfinished pods hold (at most each node's GPUs)."""
    held: dict[str, int] = {}
    for pod in pods:
        if pod.node in capacity and pod.phase not in ("Succeeded", "Failed"):
            held[pod.node] = held.get(pod.node, 0) + pod.gpus
    total = sum(capacity.values())
    return sum(min(gpus, capacity[node]) for node, gpus in held.items()) / total if total else 0.0


class Watch:
    """The workflow's pods and Jobs: which pods were made and which ever ran, which Jobs finished, and the GPU
    occupancy each second."""

    def __init__(self, kube: Kube, capacity: dict[str, int]) -> None:
        self.capacity = capacity
        self.made: set[str] = set()
        self.ran: set[str] = set()
        self.samples: list[float] = []
        self.pods = Informer(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", transform=slim_pod,
                             on_event=self._on_pod).start()
        self.jobs = Informer(kube, object_path("batch", "v1", "jobs", NAMESPACE), transform=slim_job).start()
        self.pods.wait_synced(30)
        self.jobs.wait_synced(30)

    def _on_pod(self, kind: str, pod: PodView) -> None:
        if kind == "DELETED":
            return
        self.made.add(pod.uid)
        if pod.phase in ("Running", "Succeeded"):
            self.ran.add(pod.uid)

    def sample(self) -> None:
        self.samples.append(occupancy(self.pods.list(), self.capacity))

    def expected_pods(self) -> int:
        return sum(completions for completions, _ in self.jobs.list())

    def all_finished(self) -> bool:
        jobs = self.jobs.list()
        return bool(jobs) and all(finished for _, finished in jobs)

    def stop(self) -> None:
        self.pods.stop()
        self.jobs.stop()


# -- one benchmark ----------------------------------------------------------------------------------------


def wait_served(kube: Kube, path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.get(path, {"limit": 1})
            return
        except ApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def start(scheduler: str, kubeconfig: str, workdir: Path, run_args: list[str]) -> Processes:
    """The scheduler's components, started: KAI's, or ``kai-scheduler run``'s (with the reservation policy on for
    ``project-backfill``)."""
    if scheduler == "kai":
        kai = KaiComponents(kubeconfig, workdir, kai_live.build())
        kai.start()
        return kai
    if scheduler == "project-backfill":
        (workdir / "scheduler-config.yaml").write_text(yaml.safe_dump({"reservation": {"enabled": True}}))
        run_args = [*run_args, "--config", str(workdir / "scheduler-config.yaml")]
    components = Components(kubeconfig, workdir, run_args)
    components.start(*COMPONENTS)
    return components


def run(name: str, scheduler: str, args: argparse.Namespace, kubeconfig: str, workdir: Path,
        plane: dict[str, int]) -> dict:
    """The benchmark ``name`` on ``kubeconfig`` against ``scheduler``; ``plane`` names the control plane's processes
    (pids)."""
    bench = BENCHMARKS[name]
    folder = args.knavigator_source / bench.folder
    margin = args.runtime_margin if scheduler == "project-backfill" else None
    workflows = (adjusted_workflows(folder, bench, args.knavigator_source, workdir, args.gangs, margin)
                 if args.gangs or margin is not None else [folder / w for w in bench.workflows])
    kube = Kube.connect(kubeconfig, pool_size=64)
    m.install(kube, DEPLOY)
    m.apply(kube, MPIJOB_CRD)
    wait_served(kube, object_path("kubeflow.org", "v2beta1", "mpijobs", NAMESPACE))
    nodes = configured_nodes(yaml.safe_load((folder / bench.nodes).read_text()))
    create_all(kube, nodes)
    capacity = {n["metadata"]["name"]: int(n["status"]["allocatable"][GPU]) for n in nodes}
    print(f"{name} ({scheduler}): {len(nodes)} nodes ({sum(capacity.values())} GPUs) created", flush=True)

    components: Processes = Processes()
    watch: Watch | None = None
    try:
        components = start(scheduler, kubeconfig, workdir, args.run_args)
        watch = Watch(kube, capacity)
        pids = {**plane, **{c: p.pid for c, p in components.procs.items()}}
        cpu0 = {c: cpu_seconds(pid) for c, pid in pids.items()}
        load0 = os.getloadavg()
        t0 = time.monotonic()
        with open(workdir / "knavigator.log", "wb") as log:
            knavigator = subprocess.Popen(
                [str(args.knavigator), "-kubeconfig", kubeconfig, "-workflow", ",".join(map(str, workflows))],
                cwd=args.knavigator_source, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        submitted = made = ran = finished = None
        next_sample = t0
        while time.monotonic() - t0 < args.timeout:
            now = time.monotonic()
            if now >= next_sample:
                watch.sample()
                next_sample += 1.0
            if submitted is None and knavigator.poll() is not None:
                if knavigator.returncode != 0:
                    raise SystemExit(f"knavigator failed (exit {knavigator.returncode}); see {workdir}/knavigator.log")
                submitted = now - t0
            if submitted is not None and made is None and len(watch.made) >= watch.expected_pods():
                made = now - t0
            if made is not None and ran is None and len(watch.ran) >= watch.expected_pods():
                ran = now - t0
                if args.until == "running":
                    break
            if ran is not None and watch.all_finished():
                finished = now - t0
                break
            time.sleep(0.1)
        end = time.monotonic() - t0
        pods = watch.expected_pods()
        used = {c: cpu_seconds(pid) - cpu0[c] for c, pid in pids.items()}
        result = {
            "benchmark": name, "scheduler": scheduler, "components": sorted(components.procs),
            "nodes": len(nodes), "gpus": sum(capacity.values()),
            "jobs": len(watch.jobs.list()), "pods": pods, "pods_ran": len(watch.ran),
            "submitted_s": submitted, "all_made_s": made, "all_ran_s": ran, "all_finished_s": finished,
            "pods_per_s": pods / ran if ran else None,
            "gpu_occupancy": sum(watch.samples) / len(watch.samples) if watch.samples else 0.0,
            "load_before": load0, "load_after": os.getloadavg(), "cpu_s": used,
        }
        report(result, end, args.timeout, args.until)
        return result
    finally:
        if watch is not None:
            watch.stop()
        components.stop()
        print(f"logs in {workdir}", flush=True)


def report(r: dict, end: float, timeout: float, until: str) -> None:
    def seconds(value: float | None) -> str:
        return f"{value:.1f}s" if value is not None else f"not within {timeout:.0f}s"

    run = f"{r['benchmark']} ({r['scheduler']})"
    print(f"{run}: {r['jobs']} Jobs, {r['pods_ran']}/{r['pods']} pods ran; knavigator submitted in "
          f"{seconds(r['submitted_s'])}; the Job controller made every pod in {seconds(r['all_made_s'])}; "
          f"all pods ran {seconds(r['all_ran_s'])}"
          + ("" if until == "running" else f", all Jobs finished {seconds(r['all_finished_s'])}")
          + " after knavigator's start")
    if r["pods_per_s"]:
        print(f"{run}: {r['pods_per_s']:.1f} pods/s until every pod ran")
    print(f"{run}: average GPU occupancy {r['gpu_occupancy'] * 100:.1f}% over {end:.0f}s")
    print(f"{run}: load average {' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
          f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after ({os.cpu_count()} cores); CPU seconds: "
          + ", ".join(f"{c} {s:.0f}" for c, s in sorted(r["cpu_s"].items(), key=lambda kv: -kv[1])), flush=True)


def private_run(name: str, scheduler: str, args: argparse.Namespace) -> dict:
    """``run`` on a control plane of its own, whose kwok completes only the pods that ask for it."""
    workdir = Path(tempfile.mkdtemp(prefix=f"kai-knavigator-{name}-{scheduler}-"))
    with ControlPlane(state_dir=workdir / "control-plane", job_pods_complete=False) as plane:
        return run(name, scheduler, args, str(plane.kubeconfig), workdir,
                   {n: rec.pid for n, rec in plane.processes.items()})


def mean(values: list[float | None]) -> float | None:
    """The mean, None when there is none or a run did not get that far."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


#: The summary's rows: a label and how one run's figure is read from its result.
FIGURES = (
    ("every pod ran (s)", lambda r: r["all_ran_s"]),
    ("every Job finished (s)", lambda r: r["all_finished_s"]),
    ("pods/s until every pod ran", lambda r: r["pods_per_s"]),
    ("average GPU occupancy (%)", lambda r: r["gpu_occupancy"] * 100),
    ("scheduler's components, CPU s", lambda r: sum(r["cpu_s"][c] for c in r["components"])),
    ("control plane, CPU s", lambda r: sum(s for c, s in r["cpu_s"].items() if c not in r["components"])),
)


def summary(runs: list[dict]) -> list[list[str]]:
    """Per benchmark, a table: a row per figure, a column per scheduler with every run's figure (in run order),
    and the ratio of each other scheduler's mean to KAI's when KAI ran."""
    rows: list[list[str]] = []
    for name in dict.fromkeys(r["benchmark"] for r in runs):
        by = {s: [r for r in runs if r["benchmark"] == name and r["scheduler"] == s]
              for s in dict.fromkeys(r["scheduler"] for r in runs if r["benchmark"] == name)}
        others = [s for s in by if s != "kai"] if "kai" in by else []
        rows.append([name, *by, *(f"{s} / kai" for s in others)])
        for label, figure in FIGURES:
            values = {s: [figure(r) for r in rs] for s, rs in by.items()}
            cells = [", ".join("-" if v is None else f"{v:.1f}" for v in vs) for vs in values.values()]
            kai = mean(values.get("kai", []))
            for s in others:
                mine = mean(values[s])
                cells.append(f"{mine / kai:.2f}" if mine is not None and kai else "-")
            rows.append([label, *cells])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--knavigator", default=shutil.which("knavigator"),
                   help="the knavigator binary (default: knavigator on the PATH)")
    p.add_argument("--knavigator-source", type=Path, default=os.environ.get("KNAVIGATOR_SOURCE"),
                   help="a checkout of knavigator, for its workflows (default: $KNAVIGATOR_SOURCE)")
    p.add_argument("--benchmark", nargs="+", choices=sorted(BENCHMARKS), default=list(BENCHMARKS),
                   help="the benchmarks to run, one after the other (default: all)")
    p.add_argument("--scheduler", nargs="+", choices=SCHEDULERS, default=["project"],
                   help="who schedules: this project, this project with the reservation policy on and the Jobs' "
                        "runtimes declared, or KAI's Go components; several run one after the other (default: "
                        "project)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="runs of each scheduler on each benchmark, the schedulers' order reversed every other "
                        "round (default 1)")
    p.add_argument("--gangs", action="store_true",
                   help="every run's Jobs are gangs of all their pods (kai.scheduler/batch-min-member, in copies of "
                        "the workflows); project-backfill needs it")
    p.add_argument("--runtime-margin", type=float, default=RUNTIME_MARGIN, metavar="SECONDS",
                   help="how much longer than its pods' ttl a Job's declared maximum runtime is (project-backfill; "
                        "default %(default)g)")
    p.add_argument("--until", choices=("running", "finished"), default="finished",
                   help="stop once every pod ran, or once every Job finished too (default)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run (default 3600)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every run's numbers to FILE")
    p.add_argument("--if-available", action="store_true",
                   help="without knavigator or its checkout, say so in one line and exit 0; without Go or KAI's "
                        "source, say so and leave KAI out (as tox -e bench runs it)")
    p.add_argument("run_args", nargs="*", help="extra arguments of kai-scheduler run (after --)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if "project-backfill" in args.scheduler and not args.gangs:
        p.error("project-backfill declares each Job's runtime from its pods', true only when they all start "
                "together: give --gangs")
    if "project-backfill" in args.scheduler and any(a.split("=")[0] == "--config" for a in args.run_args):
        p.error("project-backfill gives kai-scheduler run its own --config")
    missing = []
    if not args.knavigator or not os.access(args.knavigator, os.X_OK):
        missing.append("a knavigator binary (--knavigator, or knavigator on the PATH)")
    if args.knavigator_source is None or not (args.knavigator_source / "resources" / "benchmarks").is_dir():
        missing.append("a checkout of knavigator (--knavigator-source or KNAVIGATOR_SOURCE)")
    if missing:
        if args.if_available:
            print(f"knavigator's benchmarks skipped: they need {' and '.join(missing)}")
            return 0
        p.error(f"needs {' and '.join(missing)}")
    schedulers = list(dict.fromkeys(args.scheduler))
    if "kai" in schedulers:
        try:
            kai_live.build()
        except (ControlPlaneError, OSError, subprocess.CalledProcessError) as err:
            if not args.if_available:
                raise
            print(f"knavigator's benchmarks against KAI skipped: {err}")
            schedulers.remove("kai")
            if not schedulers:
                return 0
    args.knavigator = Path(args.knavigator).absolute()
    args.knavigator_source = args.knavigator_source.absolute()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the private control plane too
    runs = []
    for name in args.benchmark:
        for r in range(args.repeat):
            for scheduler in schedulers if r % 2 == 0 else reversed(schedulers):
                print(f"-- {name}: {scheduler} (run {r + 1} of {args.repeat})", flush=True)
                runs.append(private_run(name, scheduler, args))
                if args.json:
                    args.json.write_text(json.dumps(runs, indent=1))
    print_table(summary(runs))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
