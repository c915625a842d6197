"""Trace files of ``kai-scheduler replay`` (the Alibaba GPU trace v2023 CSV format) and the kernel objects
their nodes and pods become.

A node list has the columns ``sn, cpu_milli, memory_mib, gpu, model``; a pod list ``name, cpu_milli,
memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec`` (GPU models the pod accepts, ``|``
separated), ``creation_time``, ``deletion_time``, ``queue``, and this project's ``replicas`` (a row is a gang
of that many alike pods; default 1) and ``max_runtime`` (the declared maximum runtime in seconds; empty: none).
A bad row is a :class:`~kai.common.errors.ConfigError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import math
import random
from importlib import resources

import attrs

from kai.api import Job, LabelRequirement, Node, PodSet, ResourceRequest, Resources, Task, TaskStatus
from kai.common.errors import ConfigError

#: The node label carrying a node's GPU model (what ``gpu_spec`` selects on).
GPU_MODEL_LABEL = "nvidia.com/gpu.product"
MIB = 2**20


@attrs.frozen
class TracePod:
    """One pod of a pod list: CPU in millicores, memory in MiB, ``gpu_milli`` per GPU (1000 is a whole GPU)."""

    name: str
    cpu_milli: float
    memory_mib: float
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    creation: float = 0.0
    deletion: float | None = None
    queue: str = "default"
    replicas: int = 1
    max_runtime: float | None = None

    @property
    def gpu_milli_total(self) -> int:
        """The GPU milli the row asks in all (every replica), as the paper's metric counts it."""
        return self.num_gpu * self.gpu_milli * self.replicas

    def request(self) -> ResourceRequest:
        memory = self.memory_mib * MIB
        if self.num_gpu and self.gpu_milli < 1000:
            return ResourceRequest(cpu=self.cpu_milli, memory=memory, gpu_fraction=self.gpu_milli / 1000,
                                   gpu_devices=self.num_gpu)
        return ResourceRequest(cpu=self.cpu_milli, memory=memory, gpus=self.num_gpu if self.gpu_milli else 0)

    def node_affinity(self) -> tuple:
        if not self.gpu_spec:
            return ()
        return ((LabelRequirement(GPU_MODEL_LABEL, "In", self.gpu_spec),),)


def default_file(name: str) -> str:
    """The path of a trace file shipped with the package (``nodes`` or ``pods``)."""
    file = {"nodes": "openb_node_list_gpu_node.csv", "pods": "openb_pod_list_default.csv"}[name]
    return str(resources.files("kai.sim.replay").joinpath("traces").joinpath(file))


def _rows(path: str, required: tuple[str, ...]):
    try:
        f = open(path, newline="")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, row


def _number(path: str, line: int, row: dict, field: str, kind=float, default=None):
    text = (row.get(field) or "").strip()
    if not text and default is not None:
        return default
    try:
        value = kind(text)
    except ValueError:
        what = "whole number" if kind is int else "number"
        raise ConfigError(f"{path}:{line}: field {field}: {text!r} is not a {what}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{path}:{line}: field {field}: {text!r} is not a finite number")
    if value < 0:
        raise ConfigError(f"{path}:{line}: field {field}: {text!r} is negative")
    return value


def read_nodes(path: str) -> list[Node]:
    """The nodes of an Alibaba v2023 node list, each labelled with its GPU model."""
    nodes = []
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        cpu = _number(path, line, row, "cpu_milli")
        mem = _number(path, line, row, "memory_mib")
        gpus = _number(path, line, row, "gpu", int)
        labels = {GPU_MODEL_LABEL: row["model"]} if row.get("model") else {}
        nodes.append(Node(row["sn"], Resources(cpu, mem * MIB, float(gpus)), labels, (), 1001))
    return nodes


def read_pods(path: str, queue_column: str | None = None, timed: bool = False) -> list[TracePod]:
    """The pods of an Alibaba v2023 pod list, in file order. With ``queue_column`` each pod's queue is that
    column's value (``default`` when empty); ``timed`` needs the ``creation_time`` column."""
    required: tuple[str, ...] = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
    required += (queue_column,) if queue_column else ()
    required += ("creation_time",) if timed else ()
    pods = []
    for line, row in _rows(path, required):
        num_gpu = _number(path, line, row, "num_gpu", int)
        milli = _number(path, line, row, "gpu_milli", int)
        if milli > 1000:
            raise ConfigError(f"{path}:{line}: field gpu_milli: {milli} is above 1000 (one whole GPU)")
        creation = _number(path, line, row, "creation_time", default=0.0)
        deletion = None
        if (row.get("deletion_time") or "").strip():
            deletion = _number(path, line, row, "deletion_time")
            if deletion < creation:
                raise ConfigError(f"{path}:{line}: field deletion_time: {deletion:g} is before creation_time "
                                  f"{creation:g}")
        replicas = _number(path, line, row, "replicas", int, default=1)
        if replicas < 1:
            raise ConfigError(f"{path}:{line}: field replicas: {replicas} is not a positive number of pods")
        max_runtime = _number(path, line, row, "max_runtime") if (row.get("max_runtime") or "").strip() else None
        pods.append(TracePod(
            row["name"], _number(path, line, row, "cpu_milli"), _number(path, line, row, "memory_mib"),
            num_gpu, milli if num_gpu else 0,
            tuple(s for s in (row.get("gpu_spec") or "").split("|") if s),
            creation, deletion, ((row.get(queue_column) or "").strip() or "default") if queue_column else "default",
            replicas, max_runtime))
    return pods


def seeded_names(nodes: list[Node], seed: int) -> list[Node]:
    """The nodes renamed ``NNNN-<name>`` with a seeded permutation, as the paper's simulator does: the
    kernel breaks ties between equally scored nodes by name, so ties fall randomly but reproducibly."""
    order = random.Random(f"nodes-{seed}").sample(range(len(nodes)), len(nodes))
    width = len(str(len(nodes)))
    return [attrs.evolve(n, name=f"{k:0{width}d}-{n.name}") for k, n in zip(order, sorted(nodes, key=lambda n: n.name))]


def arrival_job(pod: TracePod, creation: float) -> Job:
    """The job a trace row arrives as (preemptible, in its queue, created at ``creation``, with its declared maximum
    runtime): one pod named as the row, or a gang of ``replicas`` pods ``<name>-<i>``."""
    job = Job(pod.name, pod.queue, 0, True, creation, uid=pod.name,
              pod_sets={"default": PodSet("default", pod.replicas)}, max_runtime=pod.max_runtime)
    names = [pod.name] if pod.replicas == 1 else [f"{pod.name}-{i}" for i in range(pod.replicas)]
    for name in names:
        task = Task(name, pod.name, pod.request(), TaskStatus.PENDING, None, node_affinity=pod.node_affinity(),
                    creation=creation)
        task.job = job.uid
        job.add_task(task)
    return job
