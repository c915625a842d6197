"""A seeded chaos run: the workload and the fault timeline, and a watch recording what the API showed meanwhile."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from kai.api import names
from kai.kube.client import Kube, object_path
from kai.kube.watch import Informer

#: Faults of one run: (kind, how many). A kill is followed by a restart after a short pause.
FAULTS = (("kill scheduler", 3), ("kill binder", 2), ("kill podgrouper", 1), ("restart kube-apiserver", 1),
          ("delete node", 2))
PRIORITIES = (("train", 0.55), ("inference", 0.3), ("build", 0.15))
#: Services: single GPU pods labelled ``chaos-service: <name>``, each service under a PodDisruptionBudget.
SERVICES = ("svc-a", "svc-b", "svc-c")
SERVICE_LABEL = "chaos-service"


@dataclass(frozen=True)
class Job:
    """A workload of the stream: ``min_member`` 0 is a bare pod grouped by the podgrouper (named by its queue
    label); otherwise a PodGroup of ours with ``pods`` pods naming it."""

    name: str
    at: float
    queue: str
    priority_class: str
    pods: int
    min_member: int
    gpus: int
    cpu: str
    memory: str
    fraction: str | None = None
    #: Index of the node the job's pods are pinned to (``kubernetes.io/hostname``), if any.
    pin: int | None = None
    #: The service (and so the PodDisruptionBudget) a bare pod belongs to, if any.
    service: str | None = None

    def pod_names(self) -> list[str]:
        return [self.name] if self.min_member == 0 else [f"{self.name}-{i}" for i in range(self.pods)]


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    pause: float  # before the restart of a killed component


@dataclass(frozen=True)
class Plan:
    seed: int
    jobs: list[Job]
    faults: list[Fault]
    #: Each service's PodDisruptionBudget: its ``minAvailable``.
    budgets: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def pods(self) -> int:
        return sum(len(j.pod_names()) for j in self.jobs)


def make_plan(seed: int, queues: list[str], nodes: int, target_pods: int = 200, stream_seconds: float = 35.0,
              shared_gpu_pods: int = 6, pinned: float = 0.15) -> Plan:
    """The run's workload and faults, decided by ``seed`` alone.

    Jobs: bare single pods (whole GPU or CPU only; a share ``pinned`` of them pinned to one of the
    ``nodes`` nodes), gangs of 2-4 pods, and a few shared-GPU pods, spread evenly over
    ``stream_seconds``. Faults: one per slot of equal length over the stream (in random order), at a
    random point of the slot's first half, so a component is back before the next fault. Half of the
    bare GPU pods not pinned belong to one of the :data:`SERVICES` (decided by a generator of their own,
    so a seed gives the same jobs and faults as before services), each service under a budget that
    allows two disruptions of its pods at most.
    """
    rng = random.Random(seed)
    specs: list[dict] = []
    total = shared = 0
    while total < target_pods:
        kind = rng.choices(("gpu", "cpu", "gang", "shared"), (0.35, 0.3, 0.27, 0.08))[0]
        if kind == "shared" and shared >= shared_gpu_pods:
            kind = "gpu"
        spec = {"queue": rng.choice(queues),
                "priority_class": rng.choices([p for p, _ in PRIORITIES], [w for _, w in PRIORITIES])[0],
                "cpu": rng.choice(("250m", "500m", "1")), "memory": rng.choice(("512Mi", "1Gi", "2Gi"))}
        if kind == "gang":
            size = rng.randint(2, 4)
            spec.update(pods=size, min_member=size, gpus=rng.choice((0, 1, 1, 1)))
        elif kind == "shared":
            spec.update(pods=1, min_member=1, gpus=0, fraction=rng.choice(("0.5", "0.25")))
            shared += 1
        else:
            spec.update(pods=1, min_member=0, gpus=rng.choice((1, 1, 2)) if kind == "gpu" else 0,
                        pin=rng.randrange(nodes) if rng.random() < pinned else None)
        specs.append({"kind": kind, **spec})
        total += spec["pods"]
    step = stream_seconds / len(specs)
    jobs = [Job(name=f"{s.pop('kind')}-{i}", at=round(i * step, 2), **s) for i, s in enumerate(specs)]
    kinds = [kind for kind, count in FAULTS for _ in range(count)]
    rng.shuffle(kinds)
    slot = (stream_seconds - 4.0) / len(kinds)
    faults = [Fault(at=round(3.0 + i * slot + rng.uniform(0, slot / 2), 2), kind=kind,
                    pause=round(rng.uniform(0.5, 2.0), 2))
              for i, kind in enumerate(kinds)]
    services = random.Random(f"{seed}-services")
    jobs = [dataclasses.replace(j, service=services.choice(SERVICES))
            if j.min_member == 0 and j.gpus and j.pin is None and services.random() < 0.5 else j for j in jobs]
    members = Counter(j.service for j in jobs if j.service)
    return Plan(seed, jobs, faults, {name: max(1, members[name] - 2) for name in SERVICES if members[name]})


def _pod_facts(pod: dict) -> tuple[str, str, str, str]:
    meta = pod.get("metadata") or {}
    group = (meta.get("annotations") or {}).get(names.POD_GROUP_ANNOTATION, "")
    return meta.get("uid", ""), meta.get("name", ""), (pod.get("spec") or {}).get("nodeName") or "", group


def _bind_request_facts(br: dict) -> tuple[str, str, str]:
    owner = next((o.get("uid", "") for o in (br.get("metadata") or {}).get("ownerReferences") or ()
                  if o.get("kind") == "Pod"), "")
    return owner, (br.get("spec") or {}).get("selectedNode") or "", (br.get("status") or {}).get("phase") or ""


class Recorder:
    """Watches the pods and BindRequests of one namespace for the whole run and records, per pod UID, every
    node name the pod was seen with and every node a BindRequest for it Succeeded on; also when pods went."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.nodes_seen: dict[str, set[str]] = defaultdict(set)
        self.succeeded_on: dict[str, set[str]] = defaultdict(set)
        self.names: dict[str, str] = {}
        self.groups: dict[str, str] = {}
        self.deleted: dict[str, float] = {}
        self._lock = threading.Lock()
        self.informers = [
            Informer(kube, object_path("", "v1", "pods", namespace), transform=_pod_facts, on_event=self._pod,
                     name="chaos-pods"),
            Informer(kube, object_path(*names.BINDREQUESTS, namespace), transform=_bind_request_facts,
                     on_event=self._bind_request, name="chaos-bindrequests"),
        ]

    def start(self) -> Recorder:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            informer.wait_synced(30)
        return self

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def _pod(self, kind: str, facts: tuple[str, str, str, str]) -> None:
        uid, name, node, group = facts
        with self._lock:
            self.names[uid] = name
            if group:
                self.groups[uid] = group
            if node:
                self.nodes_seen[uid].add(node)
            if kind == "DELETED":
                self.deleted[uid] = time.monotonic()

    def removed_from_vanished_nodes(self, live_nodes: set[str]) -> set[str]:
        """The PodGroups of pods that were on a node since deleted and are gone now (pod garbage collection)."""
        current = {uid for uid, _, _, _ in self.informers[0].list()}
        with self._lock:
            return {self.groups[uid] for uid, nodes in self.nodes_seen.items()
                    if uid not in current and uid in self.groups and nodes - live_nodes}

    def binding(self) -> Counter:
        """Per node, the BindRequests the binder has not finished yet, as the watch shows them now."""
        return Counter(node for _, node, phase in self.informers[1].list() if phase not in ("Succeeded", "Failed"))

    def bound(self) -> Counter:
        """Per node, the pods bound to it, as the watch shows them now."""
        return Counter(node for _, _, node, _ in self.informers[0].list() if node)

    def _bind_request(self, kind: str, facts: tuple[str, str, str]) -> None:
        owner, node, phase = facts
        if kind != "DELETED" and phase == "Succeeded" and owner:
            with self._lock:
                self.succeeded_on[owner].add(node)
