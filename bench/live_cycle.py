"""The live scheduler's cycle offline: a ClusterCache filled the way its informers fill it, then cycles
while a few pods change between them.

``live-cycle-N`` (a shape of ``bench/scale.py``): N nodes of 8 GPUs in 4 queues; 90 % of the GPUs run
single-GPU pods (each with its PodGroup and the BindRequest that bound it) and 4 % more are bound but not
running yet. Between two cycles, as the watches report them: the bound pods placed two cycles before turn
Running (40 by default), the pods the last cycle bound get their BindRequest and then their node (as the
binder does), and 10 new pending single-GPU pods arrive with their PodGroups. Each cycle is the scheduler's
(``Scheduler.run_once`` without metrics): the cache's snapshot, the session (its node accounting, the
plugins' open, the actions, the visibility API's view, close) and the committer's pass, whose writes are
recorded and not sent.

Reported per part, CPU medians over the timed cycles: ``watch`` (the informers applying the events),
``snapshot``, ``session`` (building the Session: the placed tasks' node accounting), ``open``,
``actions``, ``view`` (the visibility API's view of the cycle), ``close``, ``commit``; and a hash of every
cycle's decisions.
"""

from __future__ import annotations

import gc
import hashlib
import statistics
import time

from kai.framework import DEFAULT_CONFIG, Session
from kai.scheduler.commit import Committer
from kai.scheduler.loop import GC_MIDDLE_THRESHOLD, GC_YOUNG_THRESHOLD, Scheduler
from kai.scheduler.visibility import Visibility

GPUS_PER_NODE = 8
QUEUES = 4
RUNNING_TURNING = 40
ARRIVING = 10
PARTS = ("watch", "snapshot", "session", "open", "actions", "view", "close", "commit")


def _node(name: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "status": {
        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)},
        "conditions": [{"type": "Ready", "status": "True"}]}}


def _queue(name: str, parent: str | None, gpus: float) -> dict:
    spec: dict = {"resources": {"gpu": {"quota": gpus, "limit": -1, "overQuotaWeight": 1},
                                "cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def _podgroup(name: str, queue: str, version: int) -> dict:
    return {"metadata": {"name": name, "namespace": "bench", "uid": f"pg-{name}", "resourceVersion": str(version),
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queue": queue, "minMember": 1, "priorityClassName": "train"}}


def _pod(name: str, node: str = "", phase: str = "Pending", version: int = 1) -> dict:
    return {"metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "resourceVersion": str(version),
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"pod-group-name": name}, "labels": {"app": "bench"}},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": node, "priorityClassName": "train",
                     "containers": [{"name": "main", "resources": {
                         "requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase}}


def _bind_request(pod: str, node: str, version: int) -> dict:
    return {"metadata": {"name": pod, "namespace": "bench", "resourceVersion": str(version),
                         "ownerReferences": [{"kind": "Pod", "uid": f"uid-{pod}"}]},
            "spec": {"podName": pod, "selectedNode": node}, "status": {"phase": "Succeeded"}}


class LiveCluster:
    """The stores of a scheduler's cache and the changes the cluster makes between its cycles."""

    def __init__(self, nodes: int) -> None:
        self.loop = Scheduler(None, DEFAULT_CONFIG)  # type: ignore[arg-type]
        self.loop.committer = DryCommitter(self.loop.cache)
        #: The visibility API's view of each cycle, which ``kai-scheduler run`` takes by default.
        self.view = Visibility()
        self.version = 10
        gpus = float(nodes * GPUS_PER_NODE)
        queues = [_queue("dept", None, gpus)] + [_queue(f"queue-{q}", "dept", gpus / QUEUES) for q in range(QUEUES)]
        running = nodes * GPUS_PER_NODE * 9 // 10
        bound = nodes * GPUS_PER_NODE // 25
        pods, groups, binds = [], [], []
        for i in range(running + bound):
            name, node = f"run-{i}", f"node-{i % nodes}"
            pods.append(_pod(name, node, "Running" if i < running else "Pending"))
            groups.append(_podgroup(name, f"queue-{i % QUEUES}", 1))
            binds.append(_bind_request(name, node, 1))
        #: Pods bound but not running, oldest first, and those with a BindRequest but no node yet.
        self.bound = [p["metadata"]["name"] for p in pods[running:]]
        self.binding: list[tuple[str, str]] = []
        self.arrived = 0
        self.pods = {p["metadata"]["name"]: p for p in pods}
        stores = {"nodes": [_node(f"node-{i}") for i in range(nodes)], "queues": queues, "pods": pods,
                  "podgroups": groups, "bindrequests": binds,
                  "priorityclasses": [{"metadata": {"name": "train", "resourceVersion": "1"}, "value": 50}]}
        for name, informer in self.loop.cache.informers.items():
            informer._replace(stores.get(name, []), "1")

    def _event(self, store: str, kind: str, raw: dict) -> None:
        self.version += 1
        raw["metadata"]["resourceVersion"] = str(self.version)
        self.loop.cache.informers[store]._apply({"type": kind, "object": raw})

    def change(self, decisions) -> None:
        """What the cluster does between two cycles: ``decisions`` (the last cycle's binds) get their
        BindRequests, the binds before them their nodes, the oldest bound pods start running, new pods come."""
        for name, node in self.binding:
            pod = self.pods[name]
            pod["spec"]["nodeName"] = node
            self._event("pods", "MODIFIED", pod)
            self.bound.append(name)
        self.binding = []
        for d in decisions:
            if d.kind == "bind":
                name = d.task.name
                self._event("bindrequests", "ADDED", _bind_request(name, d.node, 0))
                self.binding.append((name, d.node))
        for name in self.bound[:RUNNING_TURNING]:
            pod = self.pods[name]
            pod["status"]["phase"] = "Running"
            self._event("pods", "MODIFIED", pod)
        del self.bound[:RUNNING_TURNING]
        for _ in range(ARRIVING):
            name = f"new-{self.arrived}"
            self.arrived += 1
            self._event("podgroups", "ADDED", _podgroup(name, f"queue-{self.arrived % QUEUES}", 0))
            self.pods[name] = _pod(name)
            self._event("pods", "ADDED", self.pods[name])

    def cycle(self, now: float) -> tuple[dict[str, float], list]:
        """One scheduler cycle at ``now``; the CPU seconds of its parts (``watch`` aside) and its decisions."""
        loop = self.loop
        cpu = [time.process_time()]
        cycle = loop.cache.snapshot(now=now)
        cpu.append(time.process_time())
        session = Session(cycle.snapshot, loop.plugins)
        cpu.append(time.process_time())
        session.open()
        cpu.append(time.process_time())
        session.run_actions()
        cpu.append(time.process_time())
        self.view(session)
        cpu.append(time.process_time())
        session.close()
        cpu.append(time.process_time())
        loop.committer.commit(session, cycle)
        cpu.append(time.process_time())
        return {p: cpu[k + 1] - cpu[k] for k, p in enumerate(PARTS[1:])}, list(session.decisions)


class DryCommitter(Committer):
    """The committer's whole pass; each write it would make is counted instead of sent."""

    def __init__(self, cache) -> None:
        super().__init__(None, cache, workers=1)  # type: ignore[arg-type]
        self.writes: dict[str, int] = {}

    def _submit(self, what, obj, fn, on_error=None, dedupe=None, decision=False) -> bool:
        if dedupe is not None:
            if self._written.get(dedupe[0]) == dedupe[1]:
                return False
            self._written[dedupe[0]] = dedupe[1]
        self.writes[what] = self.writes.get(what, 0) + 1
        return True


def _cycles(cluster: LiveCluster, repeat: int):
    """Two untimed cycles and ``repeat`` (at least 10) timed ones: the CPU seconds of each timed one's parts, every
    cycle's wall seconds and the hash of the decisions."""
    now = 1_767_225_600.0
    digest = hashlib.sha256()
    runs: list[dict[str, float]] = []
    decisions: list = []
    walls: list[float] = []
    for k in range(2 + max(repeat, 10)):
        started = time.process_time()
        cluster.change(decisions)
        watch = time.process_time() - started
        now += 1.0
        wall = time.perf_counter()
        parts, decisions = cluster.cycle(now)
        walls.append(time.perf_counter() - wall)
        digest.update(";".join(sorted(f"{d.kind}:{d.task.uid}:{d.node}" for d in decisions)).encode())
        if k >= 2:
            runs.append({"watch": watch, **parts})
    return runs, walls, digest


def run(nodes: int, repeat: int) -> dict:
    """The live cycle at ``nodes`` nodes: CPU medians per part, the wall median, the decisions' hash, the writes."""
    cluster = LiveCluster(nodes)
    thresholds = gc.get_threshold()
    gc.freeze()  # as the scheduler does once its informers have listed the cluster
    gc.set_threshold(GC_YOUNG_THRESHOLD, GC_MIDDLE_THRESHOLD, thresholds[2])
    try:
        runs, walls, digest = _cycles(cluster, repeat)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    phases = {p: statistics.median(r[p] for r in runs) for p in PARTS}
    return {"median_s": statistics.median(walls[2:]),
            "cpu_median_s": statistics.median(sum(r.values()) for r in runs), "phases_cpu_median_s": phases,
            "repeats": len(runs), "decisions": digest.hexdigest()[:16],
            "writes": dict(sorted(cluster.loop.committer.writes.items()))}
