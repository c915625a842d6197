"""The expected GPU fragmentation of a node for a workload of task shapes.

A node's *fragmentation* for a workload distribution is the free GPU that tasks drawn from the
distribution could not use, weighted by the probability of drawing them. For each shape this measure adds
up to three parts: what the *next* task of the shape could not use (the paper's measure, with memory as
well as CPU: all free GPU when the task does not fit, else the devices too small for it), and ``lookahead``
times what would be left if the node were filled with tasks of the shape as far as its devices, CPU and
memory allow -- free GPUs the node's CPU or memory cannot feed count before the CPU runs out, which is where
a fits-now view strands them. A third part, ``stranded`` times the free parts of shared devices the shape
fits by GPU on a node whose CPU or memory cannot hold one more task of it, makes a sliver stranded that way
weigh more than the rounding of the scores.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from kai.sdk import EPSILON as EPS
from kai.sdk import NodeState, Shape, mig_gpu_slices

#: Weight of the filled-node part of a shape's fragment beside the next-task part.
DEFAULT_LOOKAHEAD = 0.5
#: Weight of the free shared-device parts a shape fits by GPU on a node whose CPU or memory cannot hold it.
DEFAULT_STRANDED = 8.0


def usable_gpus(state: NodeState, shape: Shape) -> float:
    """GPU amount of ``state`` that tasks of ``shape`` could take if the node were filled with them alone:
    as many tasks as its free devices, CPU and memory all allow, times the GPU each takes."""
    if shape.models and state.model not in shape.models:
        return 0.0
    if shape.mig:
        count = dict(state.mig).get(shape.mig, 0.0)
        per_task = float(mig_gpu_slices(shape.mig))
    elif shape.gpus:
        count, per_task = state.whole // shape.gpus, float(shape.gpus)
    else:
        f = shape_fraction(state, shape)
        if f > 1 + EPS:
            return 0.0
        count = state.whole * math.floor((1 + EPS) / f) + sum(math.floor((s + EPS) / f) for s in state.slivers)
        per_task = f
    if shape.cpu > 0:
        count = min(count, (state.cpu + EPS) // shape.cpu)
    if shape.memory > 0:
        count = min(count, (state.memory + EPS) // shape.memory)
    return max(count, 0.0) * per_task


def shape_fraction(state: NodeState, shape: Shape) -> float:
    """The part of one of the node's devices a shared shape takes."""
    return shape.fraction or (shape.gpu_memory_mib / state.device_memory if state.device_memory else 2.0)


def next_task_fragment(state: NodeState, shape: Shape) -> float:
    """Free GPU of ``state`` one more task of ``shape`` could not use (the paper's measure, memory included):
    all of it when the task does not fit (model, CPU, memory or devices lacking), else what the devices it
    cannot go to hold."""
    total = state.free_gpus
    if ((shape.models and state.model not in shape.models) or shape.cpu > state.cpu + EPS
            or shape.memory > state.memory + EPS):
        return total
    if shape.mig:
        free = dict(state.mig).get(shape.mig, 0.0)
        return total - mig_gpu_slices(shape.mig) * free if free >= 1 else total
    if shape.gpus:
        return total - state.whole if state.whole >= shape.gpus - EPS else total
    f = shape_fraction(state, shape)
    if f > 1 + EPS:
        return total
    small = sum(s for s in state.slivers if s < f - EPS)
    if state.whole < 1 - EPS and small >= sum(state.slivers) - EPS:
        return total
    return small + state.mig_gpus


def stranded_gpus(state: NodeState, shape: Shape) -> float:
    """Free parts of ``state``'s shared devices a task of shared ``shape`` fits by GPU but the node's CPU or memory
    cannot hold (0 for other shapes, and when the task fits)."""
    if (not (shape.fraction or shape.gpu_memory_mib) or (shape.models and state.model not in shape.models)
            or (shape.cpu <= state.cpu + EPS and shape.memory <= state.memory + EPS)):
        return 0.0
    f = shape_fraction(state, shape)
    if f > 1 + EPS:
        return 0.0
    return sum(state.slivers) - sum(s for s in state.slivers if s < f - EPS)


def fragmentation(state: NodeState, workload: Iterable[tuple[Shape, float]],
                  lookahead: float = DEFAULT_LOOKAHEAD, stranded: float = DEFAULT_STRANDED) -> float:
    """Expected free GPU amount of ``state`` that tasks drawn from ``workload`` ((shape, probability) pairs)
    could not use. For each GPU shape, what the next task of that shape could not use
    (:func:`next_task_fragment`) plus ``lookahead`` times what is left over once the node is filled with that
    shape as far as its devices, CPU and memory allow, plus ``stranded`` times the shared-device parts it fits by
    GPU while the node's CPU or memory cannot hold it (:func:`stranded_gpus`). CPU-only shapes use no GPU and add
    nothing; they matter through the CPU and memory they leave to the GPU shapes."""
    total = state.free_gpus
    if total <= EPS:
        return 0.0
    out = 0.0
    for shape, p in workload:
        if not shape.cpu_only:
            out += p * next_task_fragment(state, shape)
            if stranded:
                out += p * stranded * stranded_gpus(state, shape)
            if lookahead:
                out += p * lookahead * (total - usable_gpus(state, shape))
    return out


def node_kinds(session, model_label: str) -> Counter:
    """The session's nodes counted by (GPU model, allocatable CPU, memory and GPUs)."""
    a = session.arrays
    return Counter((n.labels.get(model_label, ""), a.alloc_cpu[n.index], a.alloc_mem[n.index], a.alloc_gpu[n.index])
                   for n in session.nodes)


def scarcity(shape: Shape, kinds: Counter, cap: float) -> float:
    """How much scarcer than GPUs at large the nodes are that can take a task of ``shape``: the cluster's GPUs
    over the GPUs of the nodes that could hold one such task when empty (GPU model, CPU, memory, devices), at
    most ``cap``. 1 for CPU-only and MIG shapes and for shapes no node can take."""
    if shape.cpu_only or shape.mig:
        return 1.0
    need = max(shape.gpus, 1)
    total = supply = 0.0
    for (model, cpu, memory, gpus), n in kinds.items():
        total += n * gpus
        if (gpus >= need and cpu >= shape.cpu and memory >= shape.memory
                and (not shape.models or model in shape.models)):
            supply += n * gpus
    return min(cap, total / supply) if supply > 0 else 1.0


def weighted(workload: list[tuple[Shape, float]], kinds: Counter, cap: float) -> list[tuple[Shape, float]]:
    """``workload`` with each shape's probability times its :func:`scarcity`."""
    return [(s, p * scarcity(s, kinds, cap)) for s, p in workload]
