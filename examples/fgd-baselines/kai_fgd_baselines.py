"""The placement policies of the FGD paper's evaluation as kai-scheduler plugins.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
Descent", USENIX ATC'23. Each plugin scores nodes exactly as the paper's simulator does
(``pkg/simulator/plugin/*_score.go``), integer scores included, and chooses the device of a shared-GPU
task as the simulator's ``gpusel`` option used for it does. Ties go to the node name, KAI's rule; the
replay prefixes node names with a seeded permutation, as the simulator does, so ties fall randomly per seed.

=================  ==========================================================================
``bestfit``        least leftover CPU and GPU after placing, min-max normalised to 0..100
``dotprod``        least dot product of the node's free and the task's requested (CPU, GPU)
``gpupacking``     join a used GPU, then free GPUs of a used node, then an empty node
``gpuclustering``  nodes already running GPU tasks of the same kind first
``randomfit``      one feasible node at random, drawn from a hash of the task's and the node's
                   names (and argument ``seed``, default 0)
``fgd``            least growth of the paper's fragmentation measure (memory-blind) for the
                   workload of argument ``trace`` (a pod CSV) or ``workload``
=================  ==========================================================================
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections import Counter

from kai.sdk import EPSILON as EPS
from kai.sdk import (
    NodeState,
    Shape,
    after_task,
    hookimpl,
    node_gpu_memory,
    node_state,
    normalised,
    parse_workload,
    task_gpu_memory,
)

MAX_SPEC_CPU = 128000  # millicores
MAX_SPEC_GPU = 8000  # milli-GPU
MAX_SCORE = 100
#: Most entries kept in each of ``fgd``'s caches; a full cache is emptied.
MAX_CACHE = 200_000


def device_milli(node) -> list[int]:
    """Idle milli-GPU of each device of the node: 1000 per free device, the free part of each shared one."""
    s = node_state(node, "")
    return [1000] * int(s.whole + EPS) + [round(x * 1000) for x in s.slivers]


def request_milli(task) -> tuple[int, int]:
    """``(milli-GPU per device, devices)`` the task asks; ``(0, 0)`` for a task without GPUs."""
    r = task.request
    if r.is_shared_gpu:
        return round(r.gpu_fraction * 1000), r.gpu_devices
    return (1000, r.gpus) if r.gpus else (0, 0)


def best_device(task, node, groups):
    """The simulator's ``best`` device choice: the fitting device with the least idle portion."""
    mem = node_gpu_memory(node)
    return [-1.0 if g is None else -(1.0 - node.gpu_groups[g].used / mem) for g in groups]


class BestFit:
    """``int(100 * (1 - s))`` with ``s`` the CPU and GPU left after placing, each over its maximum spec and
    weighted 0.5, then min-max normalised to 0..100 over the feasible nodes (integer arithmetic, as in Go)."""

    name = "bestfit"

    @hookimpl
    def kai_nodes_alike(self):
        return True  # free CPU and devices, min-max over the nodes given: one node per class will do

    @staticmethod
    def raw_score(task, node) -> int:
        milli, devices = request_milli(task)
        s = 0.0
        s += (node.arrays.idle_cpu[node.index] - task.request.cpu) / MAX_SPEC_CPU * 0.5
        s += (sum(device_milli(node)) - milli * devices) / MAX_SPEC_GPU * 0.5
        return int((1.0 - s) * MAX_SCORE)

    @hookimpl
    def kai_node_scores(self, task, nodes):
        raw = [self.raw_score(task, n) for n in nodes]
        lo, hi = min(raw), max(raw)
        return [0.0 if hi == lo else float((x - lo) * MAX_SCORE // (hi - lo)) for x in raw]

    kai_gpu_scores = hookimpl(staticmethod(best_device))


class DotProd:
    """``int(100 * (1 - dot / 2))`` of the node's free and the task's requested (CPU, GPU), each over its
    maximum spec: the least aligned node wins."""

    name = "dotprod"

    @hookimpl
    def kai_nodes_alike(self):
        return True  # free CPU and devices only: one node per class will do

    @hookimpl
    def kai_node_scores(self, task, nodes):
        milli, devices = request_milli(task)
        pod = (task.request.cpu / MAX_SPEC_CPU, milli * devices / MAX_SPEC_GPU)
        out = []
        for n in nodes:
            dot = 0.0
            dot += n.arrays.idle_cpu[n.index] / MAX_SPEC_CPU * pod[0]
            dot += sum(device_milli(n)) / MAX_SPEC_GPU * pod[1]
            out.append(float(int(MAX_SCORE * (1.0 - dot / 2))))
        return out

    kai_gpu_scores = hookimpl(staticmethod(best_device))


class GpuPacking:
    """Tiers: share a used device (tightest first), then free devices of a used node, then an empty node."""

    name = "gpupacking"

    @hookimpl
    def kai_nodes_alike(self):
        return True  # free and total devices only: one node per class will do

    @hookimpl
    def kai_node_scores(self, task, nodes):
        if not task.request.wants_gpu:
            return [0.0] * len(nodes)
        return [float(self._score(task, n)) for n in nodes]

    @staticmethod
    def _score(task, node) -> int:
        devices = device_milli(node)
        fully_free = devices.count(1000)
        if fully_free == int(node.allocatable.gpu):
            return max(MAX_SCORE // 3 - fully_free, fully_free)
        milli, need = request_milli(task)
        used = [d for d in sorted(devices) if d >= milli][:need]
        whole_used = used.count(1000)
        if whole_used:
            return max(MAX_SCORE // 2 - whole_used, MAX_SCORE // 3)
        return max(MAX_SCORE - sum(d * 100 // 1000 for d in used) // 10, MAX_SCORE // 2)

    kai_gpu_scores = hookimpl(staticmethod(best_device))


def gpu_tag(request) -> str | None:
    if request.is_shared_gpu:
        return "share-gpu"
    return f"{request.gpus}-gpu" if request.gpus else None


class GpuClustering:
    name = "gpuclustering"

    @hookimpl
    def kai_node_scores(self, task, nodes):
        tag = gpu_tag(task.request)
        if tag is None:
            return [0.0] * len(nodes)
        out = []
        for n in nodes:
            tags = {t for t in (gpu_tag(x.request) for x in n.tasks.values()) if t}
            base = MAX_SCORE // 4 * (MAX_SPEC_GPU - sum(device_milli(n))) // MAX_SPEC_GPU
            tier = (3 if len(tags) == 1 else 2) if tag in tags else (1 if not tags else 0)
            out.append(float(base + tier * MAX_SCORE // 4))
        return out

    kai_gpu_scores = hookimpl(staticmethod(best_device))


def uniform(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts``: a stable hash (BLAKE2b), the same in every process and run."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class RandomFit:
    """Every feasible node gets an independent uniform score drawn from the task's and the node's names, so
    the best one is a uniform pick among them, reproducible for the same names. The replay prefixes the
    node names with a seeded permutation, so each seed draws differently. Does not implement
    ``kai_nodes_alike``: the pick is among nodes, never among node classes."""

    name = "randomfit"

    def __init__(self, seed: int = 0):
        self.seed = seed

    @hookimpl
    def kai_node_scores(self, task, nodes):
        return [uniform(self.seed, task.name, n.name) for n in nodes]

    @hookimpl
    def kai_gpu_scores(self, task, node, groups):
        """A uniform pick among the fitting devices: a shared device scores one draw, the entry standing for
        ``k`` free devices the largest of ``k`` draws (``u ** (1 / k)``)."""
        a, i = node.arrays, node.index
        free = int(a.idle_gpu[i] + a.rel_gpu[i] + EPS)
        return [uniform(self.seed, task.name, node.name, k) ** (1.0 / free if g is None else 1.0)
                for k, g in enumerate(groups)]


def trace_workload(path: str, coverage: float = 0.95) -> list[tuple[Shape, float]]:
    """The paper's target workload: pod shapes (CPU, GPU milli, GPU count, GPU models) of a pod CSV, memory
    ignored, most frequent first until ``coverage`` of the pods."""
    counts: Counter[Shape] = Counter()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            k, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            models = frozenset(m for m in (row.get("gpu_spec") or "").split("|") if m)
            if k and milli < 1000:
                counts[Shape(float(row["cpu_milli"]), 0.0, 0, milli / 1000, "", models)] += 1
            else:
                counts[Shape(float(row["cpu_milli"]), 0.0, k, 0.0, "", models if k else frozenset())] += 1
    total, kept = sum(counts.values()), 0
    for n, (_, c) in enumerate(counts.most_common(), 1):
        kept += c
        if kept >= coverage * total:
            return normalised(counts, n)
    return normalised(counts, len(counts))


def fragmentation(state: NodeState, workload) -> float:
    """The paper's measure (``pkg/utils/frag.go``): for each shape, all idle GPU if the shape cannot fit now
    (CPU, model or devices lacking) or takes no GPU, else the idle GPU of the devices too small for it.
    Reads only ``state``'s CPU, whole devices, slivers and model."""
    shared = sum(state.slivers)
    total = state.whole + shared
    out = 0.0
    for shape, p in workload:
        if shape.cpu_only or (shape.models and state.model not in shape.models) or shape.cpu > state.cpu + EPS:
            out += p * total
        elif shape.gpus:
            out += p * (shared if state.whole >= shape.gpus - EPS else total)
        elif state.whole >= 1 - EPS or any(s >= shape.fraction - EPS for s in state.slivers):
            out += p * sum(s for s in state.slivers if s < shape.fraction - EPS)
        else:
            out += p * total
    return out


def sigmoid_score(delta_gpus: float) -> float:
    return float(int(MAX_SCORE / (1.0 + math.exp(-delta_gpus))))


def slivers(node) -> tuple[float, ...]:
    """The free portions of the node's shared devices, smallest first, as :func:`node_state` gives them."""
    mem = node_gpu_memory(node)
    return tuple(sorted(1.0 - g.used / mem for g in node.gpu_groups.values() if 0 < g.used < mem))


class Fgd:
    """Scores by the growth of :func:`fragmentation`. The measure reads a node's free CPU, whole devices,
    slivers and -- when a shape names GPU models -- its model, so a node is looked at through those alone
    (its *state key*): the measure is cached by state, and the score and device growths by state and request;
    states repeat across nodes and tasks. Memory and MIG never enter the measure."""

    name = "fgd"

    def __init__(self, workload, model_label: str):
        self.workload, self.model_label = workload, model_label
        #: A shape names GPU models: the node's model changes its measure.
        self.by_model = any(s.models for s, _ in workload)
        #: The measure by node state.
        self.frag_cache: dict[NodeState, float] = {}
        #: Node score by (state key, request CPU, request GPUs, shared portion).
        self.score_cache: dict[tuple, float] = {}
        #: Growth deltas (``before - after``) by (state key, request CPU, request GPUs, portion, sliver number).
        self.delta_cache: dict[tuple, float] = {}

    @hookimpl
    def kai_nodes_alike(self):
        # The scores read free CPU and whole devices (shared devices make a node a class of its own), and the
        # GPU model label only when a shape names models: then alike nodes may score differently.
        return not self.by_model

    def _key(self, node) -> tuple:
        """``(free CPU, free whole devices, slivers, model)``: all of the node the measure reads."""
        a, i = node.arrays, node.index
        return (a.idle_cpu[i] + a.rel_cpu[i], a.idle_gpu[i] + a.rel_gpu[i], slivers(node) if node.gpu_groups else (),
                node.labels.get(self.model_label, "") if self.by_model else "")

    def _fragmentation(self, state: NodeState) -> float:
        hit = self.frag_cache.get(state)
        if hit is None:
            if len(self.frag_cache) >= MAX_CACHE:
                self.frag_cache.clear()
            hit = self.frag_cache[state] = fragmentation(state, self.workload)
        return hit

    def _delta(self, key: tuple, request, portion: float | None, sliver: int | None) -> float:
        """How much the measure of the node with state ``key`` falls when the task lands (on sliver number
        ``sliver``, or a device nobody shares, for a shared task)."""
        ckey = (*key, request.cpu, request.gpus, portion, sliver)
        hit = self.delta_cache.get(ckey)
        if hit is None:
            cpu, whole, shares, model = key
            state = NodeState(cpu, 0.0, whole, shares, (), model)
            hit = self._fragmentation(state) - self._fragmentation(after_task(state, request, portion, sliver))
            if len(self.delta_cache) >= MAX_CACHE:
                self.delta_cache.clear()
            self.delta_cache[ckey] = hit
        return hit

    def _score(self, key: tuple, request, portion: float | None) -> float:
        """The best score over the devices the task could take on a node with state ``key``."""
        if portion is None:
            deltas = [self._delta(key, request, None, None)]
        else:
            deltas = [self._delta(key, request, portion, k) for k, s in enumerate(key[2]) if s >= portion - EPS]
            if key[1] >= 1 - EPS:
                deltas.append(self._delta(key, request, portion, None))
        return max(sigmoid_score(d) for d in deltas)

    @hookimpl
    def kai_node_scores(self, task, nodes):
        r = task.request
        shared, cache, out = r.is_shared_gpu, self.score_cache, []
        portion = None
        for node in nodes:
            key = self._key(node)
            if shared:
                portion = task_gpu_memory(node, r) / node_gpu_memory(node)
            skey = (*key, r.cpu, r.gpus, portion)
            hit = cache.get(skey)
            if hit is None:
                if len(cache) >= MAX_CACHE:
                    cache.clear()
                hit = cache[skey] = self._score(key, r, portion)
            out.append(hit)
        return out

    @hookimpl
    def kai_gpu_scores(self, task, node, groups):
        key = self._key(node)
        mem = node_gpu_memory(node)
        portion = task_gpu_memory(node, task.request) / mem
        return [self._device_score(key, task.request, portion,
                                   None if g is None else 1.0 - node.gpu_groups[g].used / mem) for g in groups]

    def _device_score(self, key: tuple, request, portion: float, free: float | None) -> float:
        """The score of the device with ``free`` part (None: a device nobody shares); a device whose part is
        not among the node's free slivers (its tasks are all leaving) scores as a device nobody shares."""
        slivers = key[2]
        sliver = slivers.index(free) if free is not None and free in slivers else None
        return sigmoid_score(self._delta(key, request, portion, sliver))


def build_bestfit(arguments):
    return BestFit()


def build_dotprod(arguments):
    return DotProd()


def build_gpupacking(arguments):
    return GpuPacking()


def build_gpuclustering(arguments):
    return GpuClustering()


def build_randomfit(arguments):
    return RandomFit(int(arguments.get("seed", 0)))


def build_fgd(arguments):
    if "trace" in arguments:
        workload = trace_workload(str(arguments["trace"]))
    elif "workload" in arguments:
        workload = [(Shape(s.cpu, 0.0, s.gpus, s.fraction, s.mig, s.models), p)
                    for s, p in parse_workload(arguments["workload"])]
    else:
        raise ValueError("fgd needs argument 'trace' (a pod CSV) or 'workload' (a list of task shapes)")
    return Fgd(workload, str(arguments.get("model_label", "nvidia.com/gpu.product")))
