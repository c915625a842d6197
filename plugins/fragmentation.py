"""``fragmentation``: place each task where it least raises the node's expected GPU fragmentation.

The idea is Fragmentation Gradient Descent (Weng et al., USENIX ATC'23): a node's *fragmentation* for
a workload distribution is the free GPU that tasks drawn from the distribution could not use, weighted
by the probability of drawing them, and a task goes to the node (a shared-GPU task to the device) whose
fragmentation grows least when it lands there. For each shape this measure adds up to three parts: what the
*next* task of the shape could not use (the paper's measure, with memory as well as CPU: all free GPU when
the task does not fit, else the devices too small for it), and ``lookahead`` times what would be left if
the node were filled with tasks of the shape as far as its devices, CPU and memory allow -- free GPUs the
node's CPU or memory cannot feed count before the CPU runs out, which is where a fits-now view strands them.
A third part, ``stranded`` times the free parts of shared devices the shape fits by GPU on a node whose CPU or
memory cannot hold one more task of it, makes a sliver stranded that way weigh more than the rounding below.

The distribution is the argument ``workload`` (a list of shapes with weights) or, without it, learned
from the tasks that arrived most recently (argument ``window``, default 2000 tasks): every task the
scheduler sees for the first time counts once, whether it arrives with a new session or joins an open
one. Tasks that differ in memory only count as one shape, whose memory is their mean; the most frequent
shapes are kept until they cover ``coverage`` (default 0.95) of the window, at most ``max_shapes``
(default 48). Growths are compared in steps of ``resolution`` GPUs (default 0.1): nodes closer than that
tie, and the tie falls to the kernel's node order rather than to a packing rule. Each GPU shape weighs its
probability times its *scarcity*: the cluster's GPUs over the GPUs of the nodes that could take one task of
the shape when empty (at most ``scarcity``, default 50), so tasks keep off the few nodes some shapes need.
Scores only order feasible nodes and devices; they never change where a task fits.

Arguments: ``workload``, ``window``, ``coverage``, ``max_shapes``, ``weight`` (score per GPU of
fragmentation avoided, default 10), ``lookahead`` (weight of the filled-node part, default 0.5),
``resolution``, ``scarcity``, ``stranded`` (default 8), ``model_label`` (node label naming the GPU model, default
``nvidia.com/gpu.product``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from kai import _native, hookimpl
from kai.api import TaskStatus
from kai.api.resources import is_mig_resource, mig_gpu_slices
from kai.common.quantity import QuantityError, parse
from kai.framework.gpusharing import node_gpu_memory, task_gpu_memory
from kai.framework.nodes import NodeArrays

if TYPE_CHECKING:  # the compiled module has the class of its pure-Python twin
    from kai._native import fragment_py as fragment
else:
    fragment = _native.load("fragment")

DEFAULT_MODEL_LABEL = "nvidia.com/gpu.product"
#: Score of a node per GPU-equivalent of expected fragmentation avoided.
DEFAULT_WEIGHT = 10.0
#: Weight of the filled-node part of a shape's fragment beside the next-task part.
DEFAULT_LOOKAHEAD = 0.5
#: Weight of the free shared-device parts a shape fits by GPU on a node whose CPU or memory cannot hold it.
DEFAULT_STRANDED = 8.0
#: Fragmentation growths are compared in steps of this many GPUs: nodes closer than that tie.
DEFAULT_RESOLUTION = 0.1
EPS = 1e-9
#: Share of the recent arrivals the kept shapes cover (the paper's target workload: 95 % of the pods).
DEFAULT_COVERAGE = 0.95
#: Adopt a newly learned workload when it is this far (total variation) from the one in use.
REFRESH_DISTANCE = 0.02
#: Look at the learned distribution again once the new arrivals are this share of the window (1/4).
REFRESH_SHARE = 4
#: A shape's weight grows by at most this factor for the scarcity of the nodes that can take it.
DEFAULT_SCARCITY = 50.0
#: Most cached growth results kept.
MAX_CACHE = 200_000


def parse_quantity(value: Any) -> float:
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
    """What fragmentation looks at on a node: free CPU, memory, whole devices, the free portions of its
    shared devices, free MIG instances by profile, its GPU model and the memory of each GPU (MiB)."""

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


def measure_rows(workload: Iterable[tuple[Shape, float]]) -> tuple[list[tuple], list[tuple]]:
    """What ``kai._native.fragment.Measure`` takes for ``workload``: the distinct device needs of its GPU shapes
    (kind, amount, MIG slices) and per GPU shape its need's number, probability, CPU, memory and models."""
    needs: dict[tuple, int] = {}
    rows = []
    for shape, p in workload:
        if shape.cpu_only:
            continue
        if shape.mig:
            need: tuple = (fragment.MIG, shape.mig, mig_gpu_slices(shape.mig))
        elif shape.gpus:
            need = (fragment.WHOLE, shape.gpus, 0)
        elif shape.fraction:
            need = (fragment.FRACTION, shape.fraction, 0)
        else:
            need = (fragment.GPU_MEMORY, shape.gpu_memory_mib, 0)
        rows.append((needs.setdefault(need, len(needs)), p, shape.cpu, shape.memory, shape.models))
    return list(needs), rows


class Measure:
    """:func:`fragmentation` for one workload, computed by ``kai._native.fragment``: the same sums in the same
    order, so the same numbers to the last bit, many times faster. Shapes that ask the same of a node's devices
    and differ in CPU or memory only share what depends on the devices."""

    def __init__(self, workload: Iterable[tuple[Shape, float]], lookahead: float = DEFAULT_LOOKAHEAD,
                 stranded: float = DEFAULT_STRANDED):
        self.compiled = fragment.Measure(*measure_rows(workload), lookahead, stranded)

    def __call__(self, state: NodeState) -> float:
        return self.compiled(state.whole, state.slivers, state.mig, state.mig_gpus, state.model, state.cpu,
                             state.memory, state.device_memory)


def node_state(node, model_label: str) -> NodeState:
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


def after_task(state: NodeState, request, portion: float | None, sliver: int | None) -> NodeState:
    """``state`` once a task with ``request`` lands; a shared task takes ``portion`` of sliver number
    ``sliver`` or, with ``sliver`` None, of a device nobody shares yet."""
    whole, slivers = state.whole - request.gpus, list(state.slivers)
    if portion is not None:
        if sliver is None:
            whole -= 1
            slivers.append(1.0 - portion)
        else:
            slivers[sliver] -= portion
        slivers = [s for s in slivers if s > EPS]
    mig = dict(state.mig)
    for profile, count in request.mig.items():
        mig[profile] = mig.get(profile, 0.0) - count
    return NodeState(state.cpu - request.cpu, state.memory - request.memory, whole, tuple(sorted(slivers)),
                     tuple(sorted((k, v) for k, v in mig.items() if v > 0)), state.model, state.device_memory)


def task_shape(task, model_label: str) -> Shape:
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
            shape = Shape(parse_quantity(e.get("cpu", 0)) * 1000, parse_quantity(e.get("memory", 0)),
                          int(e.get("gpus", 0)), float(e.get("gpu_fraction", 0.0)), str(e.get("mig", "")),
                          frozenset(str(m) for m in e.get("models", ()) or ()),
                          int(parse_quantity(e.get("gpu_memory", 0)) / 2**20))
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


def normalised(counts: Counter, max_shapes: int) -> list[tuple[Shape, float]]:
    """The ``max_shapes`` most frequent shapes with probabilities summing to 1."""
    top = counts.most_common(max_shapes)
    total = sum(w for _, w in top)
    return [(s, w / total) for s, w in top] if total > 0 else []


def covering(counts: Counter, coverage: float, max_shapes: int) -> list[tuple[Shape, float]]:
    """The most frequent shapes of ``counts`` until they cover ``coverage`` of its total (at most ``max_shapes``
    of them), with probabilities summing to 1."""
    need, kept = coverage * sum(counts.values()) - EPS, 0.0
    for n, (_, c) in enumerate(counts.most_common(max_shapes), 1):
        kept += c
        if kept >= need:
            return normalised(counts, n)
    return normalised(counts, max_shapes)


def request_key(request) -> tuple:
    return request.cpu, request.memory, request.gpus, tuple(sorted(request.mig.items())) if request.mig else ()


def distance(a: list[tuple[Shape, float]], b: list[tuple[Shape, float]]) -> float:
    """Total variation distance between two workloads."""
    pa, pb = dict(a), dict(b)
    return 0.5 * sum(abs(pa.get(k, 0.0) - pb.get(k, 0.0)) for k in pa.keys() | pb.keys())


def memory_moved(new: list[tuple[Shape, float]], old: list[tuple[Shape, float]]) -> bool:
    """Whether a shape of ``new`` asks more than ``REFRESH_DISTANCE`` more or less memory than the same shape,
    memory aside, of ``old``."""
    before = {attrs.evolve(s, memory=0.0): s.memory for s, _ in old}
    for shape, _ in new:
        m = before.get(attrs.evolve(shape, memory=0.0))
        if m is not None and abs(shape.memory - m) > REFRESH_DISTANCE * max(shape.memory, m):
            return True
    return False


class Fragmentation:
    name = "fragmentation"

    def __init__(self, workload: list[tuple[Shape, float]] | None, window: int, max_shapes: int, weight: float,
                 model_label: str, lookahead: float = DEFAULT_LOOKAHEAD, coverage: float = DEFAULT_COVERAGE,
                 resolution: float = DEFAULT_RESOLUTION, scarcity_cap: float = DEFAULT_SCARCITY,
                 stranded: float = DEFAULT_STRANDED):
        self.fixed = workload
        self.window, self.max_shapes, self.weight, self.model_label = window, max_shapes, weight, model_label
        self.coverage, self.resolution = coverage, resolution
        self.lookahead, self.scarcity_cap, self.stranded = lookahead, scarcity_cap, stranded
        #: The nodes the shapes' scarcity was last weighed against (:func:`node_kinds`).
        self.kinds: Counter = Counter()
        #: The window: per task its shape without memory (its group) and its memory; per group the number
        #: of its tasks in the window and their total memory.
        self.recent: deque[tuple[Shape, float]] = deque()
        self.counts: Counter[Shape] = Counter()
        self.memory: defaultdict[Shape, float] = defaultdict(float)
        self.fresh = 0
        self.seen: set[str] = set()
        self.workload: list[tuple[Shape, float]] = workload or []
        #: The learned distribution in use without memory (compared with a newly learned one).
        self.groups: list[tuple[Shape, float]] = []
        self.measure = Measure(self.workload, lookahead, stranded)
        self.by_model = any(s.models or s.gpu_memory_mib for s, _ in self.workload)
        #: Fragmentation growth by (node state, request): node states repeat across nodes and sessions.
        self.cache: dict[tuple, tuple[float, tuple[float, ...]]] = {}
        #: Fragmentation by node state.
        self.frag_cache: dict[NodeState, float] = {}
        #: The node amounts the node states below were read from, and per node position the version of the
        #: node its state was read at (-1: not read yet) and that state.
        self.arrays: NodeArrays | None = None
        self.versions: list[int] = []
        self.states: list[NodeState | None] = []
        #: One object per distinct node state read: the caches find them by identity.
        self.interned: dict[NodeState, NodeState] = {}

    def _learn(self, task) -> None:
        shape = task_shape(task, self.model_label)
        group = attrs.evolve(shape, memory=0.0)
        self.recent.append((group, shape.memory))
        self.counts[group] += 1
        self.memory[group] += shape.memory
        if len(self.recent) > self.window:
            old, memory = self.recent.popleft()
            self.counts[old] -= 1
            self.memory[old] -= memory
            if not self.counts[old]:
                del self.counts[old], self.memory[old]
        self.fresh += 1

    def _with_memory(self, groups: list[tuple[Shape, float]]) -> list[tuple[Shape, float]]:
        """``groups`` (shapes without memory), each with the mean memory of its tasks in the window."""
        return [(attrs.evolve(g, memory=self.memory[g] / self.counts[g]), p) for g, p in groups]

    def _adopt(self) -> None:
        """Adopt the learned distribution once it moved far enough from the one in use."""
        if not self.fresh or (self.workload and self.fresh < len(self.recent) // REFRESH_SHARE):
            return
        self.fresh = 0
        groups = covering(self.counts, self.coverage, self.max_shapes)
        learned = self._with_memory(groups)
        if (not self.workload or distance(groups, self.groups) > REFRESH_DISTANCE
                or memory_moved(learned, self.workload)):
            self.groups, self.workload = groups, learned
            self.by_model = any(s.models or s.gpu_memory_mib for s, _ in learned)
            self._remeasure()

    def _remeasure(self) -> None:
        """Measure with the workload in use, its shapes weighted by their scarcity on the known nodes."""
        self.measure = Measure(weighted(self.workload, self.kinds, self.scarcity_cap), self.lookahead, self.stranded)
        self.cache.clear()
        self.frag_cache.clear()

    @hookimpl
    def kai_session_open(self, session):
        """Weigh the shapes against the session's nodes when they changed; learn the shapes of pending tasks
        not seen before; adopt the new distribution once it moved."""
        kinds = node_kinds(session, self.model_label)
        if kinds != self.kinds:
            self.kinds = kinds
            self._remeasure()
        if self.fixed is not None:
            return
        pending: set[str] = set()
        arrivals = []
        for job in session.jobs.values():
            for task in job.tasks.values():
                if task.status is TaskStatus.PENDING:
                    pending.add(task.uid)
                    if task.uid not in self.seen and not task.request.is_best_effort:
                        arrivals.append((job.creation, task.creation, task.uid, task))
        self.seen = pending
        arrivals.sort(key=lambda x: x[:3])
        for *_, task in arrivals:
            self._learn(task)
        self._adopt()

    @hookimpl
    def kai_session_job_added(self, session, job):
        """Learn the shapes of a job that arrived in the open session."""
        if self.fixed is not None:
            return None
        for task in job.tasks.values():
            if task.status is TaskStatus.PENDING and task.uid not in self.seen and not task.request.is_best_effort:
                self.seen.add(task.uid)
                self._learn(task)
        self._adopt()
        return None

    @hookimpl
    def kai_nodes_alike(self):
        # Scores read a node's amounts and shared devices (nodes with shared devices are classes of their
        # own); its GPU model and device memory only when a shape of the workload asks for them.
        return not self.by_model

    def _fragmentation(self, state: NodeState) -> float:
        hit = self.frag_cache.get(state)
        if hit is None:
            hit = self.frag_cache[state] = self.measure(state)
        return hit

    def _states(self, arrays: NodeArrays) -> tuple[list[int], list[NodeState | None]]:
        """Per node position of ``arrays``, the version its state was read at (-1: not read) and that state."""
        if arrays is not self.arrays:
            self.arrays, self.versions, self.states = arrays, [-1] * len(arrays.version), [None] * len(arrays.version)
        return self.versions, self.states

    def _state(self, node) -> NodeState:
        """:func:`node_state` of ``node``, read again only when the node's amounts changed since."""
        versions, states = self._states(node.arrays)
        i, version = node.index, node.arrays.version[node.index]
        state = states[i]
        if versions[i] != version or state is None:
            state = node_state(node, self.model_label)
            if len(self.interned) >= MAX_CACHE:
                self.interned.clear()
            state = states[i] = self.interned.setdefault(state, state)
            versions[i] = version
        return state

    def _portion(self, node, request) -> float | None:
        """The part of one of ``node``'s devices the shared-GPU ``request`` takes (None: not a shared request)."""
        return task_gpu_memory(node, request) / node_gpu_memory(node) if request.is_shared_gpu else None

    def _growth(self, request, state: NodeState, key: tuple) -> tuple[float, tuple[float, ...]]:
        """The least fragmentation growth of ``state`` over the devices a task with ``request`` could take, and
        for a shared task the growth per free portion of ``state.slivers`` (inf where it does not fit) followed
        by the growth on a device nobody shares; ``key`` is ``(state, request_key(request), portion)``."""
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        portion = key[2]
        frag = self._fragmentation
        before = frag(state)
        if portion is None:
            growth: tuple[float, ...] = (frag(after_task(state, request, None, None)) - before,)
        else:
            growth = tuple(frag(after_task(state, request, portion, k)) - before
                           if s >= portion - EPS else math.inf for k, s in enumerate(state.slivers))
            if state.whole >= 1 - EPS:
                growth += (frag(after_task(state, request, portion, None)) - before,)
        least = min(growth, default=0.0)
        result = (0.0 if least == math.inf else least), growth
        if len(self.cache) >= MAX_CACHE:
            self.cache.clear()
            self.frag_cache.clear()
        self.cache[key] = result
        return result

    @hookimpl
    def kai_node_scores(self, task, nodes):
        if not self.workload or task.request.is_best_effort or not nodes:
            return None
        r = task.request
        rkey, step = request_key(r), self.resolution
        weight, cache, growth, read = -self.weight, self.cache, self._growth, self._state
        versions, states = self._states(nodes[0].arrays)
        # The portion of a device a shared task takes, by the node's device memory (the same on alike nodes).
        portions: dict[int, float | None] = {}
        out = []
        for node in nodes:
            a, i = node.arrays, node.index
            state = states[i]
            if versions[i] != a.version[i] or state is None:
                state = read(node)
            memory = node.node.gpu_memory_mib
            if memory not in portions:
                portions[memory] = self._portion(node, r)
            key = (state, rkey, portions[memory])
            hit = cache.get(key)
            if hit is None:
                hit = growth(r, state, key)
            out.append(weight * (round(hit[0] / step) * step if step else hit[0]))
        return out

    @hookimpl
    def kai_gpu_scores(self, task, node, groups):
        if not self.workload:
            return None
        state = self._state(node)
        _, growth = self._growth(task.request, state, (state, request_key(task.request),
                                                       self._portion(node, task.request)))
        mem = node_gpu_memory(node)
        scores = []
        for gid in groups:
            free = None if gid is None else 1.0 - node.gpu_groups[gid].used / mem
            if free is not None and free in state.slivers:
                g = growth[state.slivers.index(free)]
            else:  # a device nobody shares, or a group whose tasks are all leaving
                g = growth[-1] if state.whole >= 1 - EPS else 0.0
            scores.append(-self.weight * g if g != math.inf else 0.0)
        return scores


def build(arguments):
    workload = parse_workload(arguments["workload"]) if "workload" in arguments else None
    try:
        window = int(arguments.get("window", 2000))
        max_shapes = int(arguments.get("max_shapes", 48))
        weight = float(arguments.get("weight", DEFAULT_WEIGHT))
        lookahead = float(arguments.get("lookahead", DEFAULT_LOOKAHEAD))
        coverage = float(arguments.get("coverage", DEFAULT_COVERAGE))
        resolution = float(arguments.get("resolution", DEFAULT_RESOLUTION))
        scarcity_cap = float(arguments.get("scarcity", DEFAULT_SCARCITY))
        stranded = float(arguments.get("stranded", DEFAULT_STRANDED))
    except (TypeError, ValueError) as err:
        raise ValueError("arguments window, max_shapes, weight, lookahead, coverage, resolution, scarcity and stranded "
                         f"must be numbers: {err}") from None
    if (window < 1 or max_shapes < 1 or weight <= 0 or not 0 <= lookahead < math.inf or not 0 < coverage <= 1
            or not 0 <= resolution < math.inf or not 1 <= scarcity_cap < math.inf or not 0 <= stranded < math.inf):
        raise ValueError("arguments window and max_shapes must be at least 1, weight positive, lookahead, resolution "
                         "and stranded numbers from 0 up, coverage in (0, 1] and scarcity at least 1")
    return Fragmentation(workload, window, max_shapes, weight, str(arguments.get("model_label", DEFAULT_MODEL_LABEL)),
                         lookahead, coverage, resolution, scarcity_cap, stranded)
