"""Helpers for testing scheduling plugins (shipped or third-party) on in-memory clusters.

Build objects tersely, assemble a snapshot, and run the real kernel over it with the plugins you
name -- installed ones by entry-point name, plus any plugin object that is not installed yet::

    from kai import testing as kt

    snap = kt.cluster(
        nodes=[kt.node("n1", gpus=8), kt.node("n2", gpus=8, labels={"zone": "b"})],
        jobs=[kt.job("train", queue="q", tasks=2, gpus=1)],
    )
    session = kt.run(snap, plugins=["predicates", "mine"], extra_plugins={"mine": build})
    assert kt.placements(session) == {"train-0": "n2", "train-1": "n2"}

Quantities are the scheduler's units: CPU in millicores, memory in bytes, GPUs in devices.
A snapshot shows the outcome of the last session run on it until the next session on it (or
``snapshot.rewind()``) puts its tasks and jobs back as they were built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

from kai.api import (
    UNLIMITED,
    Job,
    Node,
    PodSet,
    Queue,
    QuotaSpec,
    ResourceRequest,
    Resources,
    ResourceTypeQuota,
    Taint,
    Task,
    TaskStatus,
    Topology,
)
from kai.api.disruption import DisruptionBudget
from kai.api.dra import DynamicResources
from kai.api.storage import Storage
from kai.framework import Plugins, SchedulerConfig, Session, Snapshot, build_snapshot, run_session
from kai.framework import PluginSpec as PluginSpec  # part of this module's API: ``kt.PluginSpec(name, arguments)``
from kai.framework.config import DEFAULT_CONFIG
from kai.plugin_loader import ACTION_GROUP, PLUGIN_GROUP, discover
from kai.sim.replay import trace as replay_trace

NOW = 1_800_000_000.0
NODE_CPU = 64_000.0
NODE_MEMORY = 512 * 2**30
TASK_CPU = 1000.0
TASK_MEMORY = float(2**30)


def node(name: str, gpus: int = 0, cpu: float = NODE_CPU, memory: float = NODE_MEMORY,
         labels: Mapping[str, str] | None = None, taints: Iterable[Taint] = (), max_pods: int = 110,
         scalars: Mapping[str, float] | None = None, **fields: Any) -> Node:
    """A node with ``gpus`` whole GPUs; other :class:`kai.api.Node` fields as keyword arguments."""
    return Node(name, Resources(float(cpu), float(memory), float(gpus), dict(scalars or {})),
                dict(labels or {}), tuple(taints), max_pods, **fields)


def queue(name: str, parent: str | None = None, deserved_gpus: float = 0.0, limit_gpus: float = UNLIMITED,
          over_quota_weight: float = 1.0, priority: int = 100, creation: float = 0.0,
          resource_types: Iterable[ResourceTypeQuota] = ()) -> Queue:
    """A queue with a GPU quota (CPU and memory unlimited) and its GPU quota per resource type (:func:`gpu_type`);
    ``parent`` names its parent queue."""
    return Queue(name, parent, priority, QuotaSpec(deserved_gpus, limit_gpus, over_quota_weight),
                 creation=creation, resource_types=tuple(resource_types))


def gpu_type(name: str, node_selector: Mapping[str, str], deserved_gpus: float = 0.0, limit_gpus: float = UNLIMITED,
             over_quota_weight: float = 1.0) -> ResourceTypeQuota:
    """A queue's GPU quota on the nodes whose labels match ``node_selector`` (for :func:`queue`)."""
    return ResourceTypeQuota(name, dict(node_selector), QuotaSpec(deserved_gpus, limit_gpus, over_quota_weight))


def task(name: str, gpus: int = 0, cpu: float = TASK_CPU, memory: float = TASK_MEMORY,
         status: TaskStatus | str = TaskStatus.PENDING, node: str | None = None, **fields: Any) -> Task:
    """One task (pod); other :class:`kai.api.Task` fields (labels, tolerations...) as keyword arguments.

    Its ``job`` is set when it is given to :func:`job`.
    """
    request = fields.pop("request", None) or ResourceRequest(cpu=float(cpu), memory=float(memory), gpus=gpus)
    return Task(name, "", request, TaskStatus(status), node, **fields)


def job(name: str, queue: str = "default", tasks: int | Sequence[Task] = 1, gpus: int = 0,
        cpu: float = TASK_CPU, memory: float = TASK_MEMORY, min_available: int | None = None,
        priority: int = 0, creation: float = 0.0, status: TaskStatus | str = TaskStatus.PENDING,
        node: str | Sequence[str] | None = None, preemptible: bool | None = None, **task_fields: Any) -> Job:
    """A job (PodGroup) with one pod set of gang size ``min_available`` (default: all its tasks).

    ``tasks`` is a count -- tasks ``<name>-0``, ``<name>-1``... each asking ``gpus``/``cpu``/``memory``,
    in ``status`` on ``node`` (one name, or one per task), with ``task_fields`` -- or a list of
    :func:`task` objects. ``preemptible`` defaults to KAI's rule: priority below 100.
    """
    if isinstance(tasks, int):
        nodes = [node] * tasks if node is None or isinstance(node, str) else list(node)
        tasks = [task(f"{name}-{i}", gpus, cpu, memory, status, nodes[i], creation=creation,
                                   **task_fields) for i in range(tasks)]
    j = Job(name, queue, priority, priority < 100 if preemptible is None else preemptible, creation,
            pod_sets={"default": PodSet("default", len(tasks) if min_available is None else min_available)})
    for t in tasks:
        t.job = j.uid
        j.add_task(t)
    return j


def cluster(nodes: Iterable[Node] = (), queues: Iterable[Queue] | None = None, jobs: Iterable[Job] = (),
            now: float = NOW, topologies: Iterable[Topology] = (), config_maps: Iterable[str] = (),
            storage: Storage | None = None, dra: DynamicResources | None = None,
            budgets: Iterable[DisruptionBudget] = ()) -> Snapshot:
    """A validated snapshot. Without ``queues``, one root queue per queue name the jobs use; ``config_maps``
    are the ConfigMaps that exist (``namespace/name``), ``storage`` the claims, volumes and classes, ``dra``
    the device classes, resource slices and resource claims, ``budgets`` the PodDisruptionBudgets."""
    jobs = list(jobs)
    if queues is None:
        queues = [queue(n) for n in dict.fromkeys(j.queue for j in jobs)]
    return build_snapshot(list(nodes), list(queues), jobs, now, list(topologies), config_maps, storage, dra,
                          budgets=budgets)


def _spec(p: str | PluginSpec) -> PluginSpec:
    return p if isinstance(p, PluginSpec) else PluginSpec(p)


class _LocalEntryPoint:
    """Stands in for an entry point of a plugin that is not installed."""

    dist = None

    def __init__(self, name: str, builder: Callable[[dict[str, Any]], object]):
        self.name = name
        self.value = f"{builder.__module__}:{getattr(builder, '__qualname__', builder)}"
        self._builder = builder

    def load(self) -> Callable[[dict[str, Any]], object]:
        return self._builder


def plugin_manager(names: Iterable[str | PluginSpec] | None = None, actions: Sequence[str] = ("allocate",),
            extra_plugins: Mapping[str, Callable[[dict[str, Any]], object]] | None = None) -> Plugins:
    """The plugin manager of a configuration: ``names`` in call order (default: the shipped defaults).

    ``extra_plugins`` maps a name to a builder ``build(arguments) -> plugin object``; it is usable in
    ``names`` like an installed plugin (and hides an installed one of the same name).
    """
    specs = DEFAULT_CONFIG.plugins if names is None else tuple(_spec(p) for p in names)
    installed = entry_points()
    available = dict(discover(PLUGIN_GROUP, installed))
    for name, builder in (extra_plugins or {}).items():
        available[name] = cast(EntryPoint, _LocalEntryPoint(name, builder))
    return Plugins(SchedulerConfig(tuple(actions), specs), available, discover(ACTION_GROUP, installed))


def run(snapshot: Snapshot, plugins: Iterable[str | PluginSpec] | None = None, actions: Sequence[str] = ("allocate",),
        extra_plugins: Mapping[str, Callable[[dict[str, Any]], object]] | None = None) -> Session:
    """Open a session on ``snapshot``, run ``actions``, close it, and return the closed session.

    ``plugins`` and ``extra_plugins`` as for :func:`plugin_manager`.
    """
    return run_session(snapshot, plugin_manager(plugins, actions, extra_plugins))


def placements(session: Session, kind: str = "bind") -> dict[str, str | None]:
    """Task name -> node of the session's decisions of ``kind`` (``bind``, ``pipeline`` or ``evict``)."""
    return {d.task.name: d.node for d in session.decisions if d.kind == kind}


def fit_error(session: Session, task_name: str) -> str | None:
    """The fit error of the task named ``task_name`` (any job), or None."""
    for j in session.jobs.values():
        t = j.tasks.get(task_name)
        if t is not None:
            return session.task_fit_errors.get(t.uid)
    return None


def seeded_names(nodes: Sequence[Node], seed: int) -> list[Node]:
    """The nodes renamed as ``kai-scheduler replay`` names them for ``seed`` (``NNNN-<name>``, a seeded
    permutation), so that ties between equally scored nodes fall as in that replay."""
    return replay_trace.seeded_names(list(nodes), seed)


def trace_file(name: str) -> str:
    """The path of a trace file shipped with kai-scheduler: ``"nodes"`` or ``"pods"`` (the node list and the
    default pod list of the Alibaba GPU trace ``kai-scheduler replay`` reads)."""
    return replay_trace.default_file(name)
