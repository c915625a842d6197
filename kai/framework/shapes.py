"""Task shapes, workloads of them, and what a node has free for them: the terms of placement plugins
that weigh a workload against the nodes (the ``fragmentation`` plugin, the FGD paper's baselines).

A :class:`Shape` is what a task asks (CPU, memory, whole GPUs, a GPU fraction or amount of GPU memory,
or a MIG profile, and the GPU models it may run on); a workload is a list of ``(shape, probability)``
pairs, given as a plugin argument (:func:`parse_workload`) or counted from tasks (:func:`task_shape`,
:func:`normalised`). A :class:`NodeState` is what a session node has free (:func:`node_state`), and
:func:`after_task` what it has left once a task lands.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs

from kai.api import EPSILON, ResourceRequest, Task, is_mig_resource, mig_gpu_slices
from kai.common.quantity import QuantityError, parse
from kai.framework.gpusharing import node_gpu_memory
from kai.framework.nodes import NodeInfo


def _amount(value: Any) -> float:
    """A Kubernetes-style amount (``500m``, ``2``, ``16Gi``) as a number, finite and not negative."""
    try:
        number = float(parse(str(value)))
    except QuantityError:
        number = math.nan
    if not 0 <= number < math.inf:
        raise ValueError(f"{value!r} is not an amount like 500m, 4 or 16Gi")
    return number


@attrs.define(frozen=True, cache_hash=True)
class Shape:
    """A task shape of the workload: CPU (millicores), memory (bytes), whole GPUs, a GPU fraction, an amount
    of GPU memory (MiB) or a MIG profile, and the GPU models it may run on (empty: any)."""

    cpu: float = 0.0
    memory: float = 0.0
    gpus: int = 0
    fraction: float = 0.0
    mig: str = ""
    models: frozenset[str] = frozenset()
    gpu_memory_mib: int = 0

    @property
    def cpu_only(self) -> bool:
        return not (self.gpus or self.fraction or self.mig or self.gpu_memory_mib)


@attrs.define(frozen=True, cache_hash=True)
class NodeState:
    """What a node has free for task shapes: CPU, memory, whole devices, the free portions of its shared
    devices, free MIG instances by profile, its GPU model and the memory of each GPU (MiB)."""

    cpu: float
    memory: float
    whole: float
    slivers: tuple[float, ...] = ()
    mig: tuple[tuple[str, float], ...] = ()
    model: str = ""
    device_memory: float = 0.0

    @property
    def mig_gpus(self) -> float:
        return sum(mig_gpu_slices(p) * n for p, n in self.mig)

    @property
    def free_gpus(self) -> float:
        return self.whole + sum(self.slivers) + self.mig_gpus


def node_state(node: NodeInfo, model_label: str) -> NodeState:
    """The :class:`NodeState` of a session node (idle plus releasing, as KAI's placement counts)."""
    a, i = node.arrays, node.index
    mem = node_gpu_memory(node)
    slivers = tuple(sorted(1.0 - g.used / mem for g in node.gpu_groups.values() if 0 < g.used < mem)
                    ) if node.gpu_groups else ()
    scalars = a.idle_scalars[i]
    rel = a.rel_scalars[i]
    mig = tuple(sorted((k, v + rel.get(k, 0.0)) for k, v in scalars.items() if is_mig_resource(k) and v > 0)
                ) if scalars else ()
    return NodeState(a.idle_cpu[i] + a.rel_cpu[i], a.idle_mem[i] + a.rel_mem[i], a.idle_gpu[i] + a.rel_gpu[i],
                     slivers, mig, node.labels.get(model_label, ""), float(mem))


def after_task(state: NodeState, request: ResourceRequest, portion: float | None, sliver: int | None) -> NodeState:
    """``state`` once a task with ``request`` lands; a shared task takes ``portion`` of sliver number
    ``sliver`` or, with ``sliver`` None, of a device nobody shares yet."""
    whole, slivers = state.whole - request.gpus, list(state.slivers)
    if portion is not None:
        if sliver is None:
            whole -= 1
            slivers.append(1.0 - portion)
        else:
            slivers[sliver] -= portion
        slivers = [s for s in slivers if s > EPSILON]
    mig = dict(state.mig)
    for profile, count in request.mig.items():
        mig[profile] = mig.get(profile, 0.0) - count
    return NodeState(state.cpu - request.cpu, state.memory - request.memory, whole, tuple(sorted(slivers)),
                     tuple(sorted((k, v) for k, v in mig.items() if v > 0)), state.model, state.device_memory)


def task_shape(task: Task, model_label: str) -> Shape:
    """The shape of a task: its request and the GPU models its node selector or affinity allow."""
    r = task.request
    models: frozenset[str] = frozenset()
    if model_label in task.node_selector:
        models = frozenset([task.node_selector[model_label]])
    else:
        for term in task.node_affinity:
            for req in term:
                if req.key == model_label and req.operator == "In":
                    models = frozenset(req.values)
    mig = min(r.mig) if r.mig else ""
    return Shape(r.cpu, r.memory, r.gpus, r.gpu_fraction, mig, models, 0 if r.gpu_fraction else r.gpu_memory_mib)


def parse_workload(entries: Any) -> list[tuple[Shape, float]]:
    """The ``workload`` argument: a list of ``{cpu, memory, gpus|gpu_fraction|gpu_memory|mig, models, weight}``."""
    if not isinstance(entries, list) or not entries:
        raise ValueError("argument 'workload' must be a non-empty list of task shapes")
    out = []
    for k, e in enumerate(entries):
        if not isinstance(e, Mapping):
            raise ValueError(f"workload[{k}] must be a mapping, not {e!r}")
        unknown = set(e) - {"cpu", "memory", "gpus", "gpu_fraction", "gpu_memory", "mig", "models", "weight"}
        if unknown:
            raise ValueError(f"workload[{k}] has unknown keys {sorted(unknown)}")
        try:
            shape = Shape(_amount(e.get("cpu", 0)) * 1000, _amount(e.get("memory", 0)),
                          int(e.get("gpus", 0)), float(e.get("gpu_fraction", 0.0)), str(e.get("mig", "")),
                          frozenset(str(m) for m in e.get("models", ()) or ()),
                          int(_amount(e.get("gpu_memory", 0)) / 2**20))
            weight = float(e.get("weight", 1.0))
        except (TypeError, ValueError) as err:
            raise ValueError(f"workload[{k}]: {err}") from None
        if (weight <= 0 or not 0 <= shape.fraction < 1 or shape.gpus < 0
                or sum(map(bool, (shape.gpus, shape.fraction, shape.gpu_memory_mib, shape.mig))) > 1):
            raise ValueError(f"workload[{k}]: weight must be positive, gpu_fraction in [0, 1), and at most one of "
                             "gpus, gpu_fraction, gpu_memory and mig given")
        if shape.mig and not is_mig_resource(shape.mig):
            raise ValueError(f"workload[{k}]: {shape.mig!r} is not a MIG profile resource name")
        out.append((shape, weight))
    return normalised(Counter(dict(out)), len(out))


def normalised(counts: Counter[Shape], max_shapes: int) -> list[tuple[Shape, float]]:
    """The ``max_shapes`` most frequent shapes with probabilities summing to 1."""
    top = counts.most_common(max_shapes)
    total = sum(w for _, w in top)
    return [(s, w / total) for s, w in top] if total > 0 else []
