"""The ``fragmentation`` plugin: each task goes to the node (a shared-GPU task to the device) whose
fragmentation (:mod:`.measure`) grows least when it lands there.

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

import attrs

from kai.sdk import EPSILON as EPS
from kai.sdk import (
    NodeArrays,
    NodeState,
    Shape,
    TaskStatus,
    after_task,
    hookimpl,
    node_gpu_memory,
    node_state,
    normalised,
    parse_workload,
    task_gpu_memory,
    task_shape,
)

from .kernel import Measure
from .measure import DEFAULT_LOOKAHEAD, DEFAULT_STRANDED, node_kinds, weighted

DEFAULT_MODEL_LABEL = "nvidia.com/gpu.product"
#: Score of a node per GPU-equivalent of expected fragmentation avoided.
DEFAULT_WEIGHT = 10.0
#: Fragmentation growths are compared in steps of this many GPUs: nodes closer than that tie.
DEFAULT_RESOLUTION = 0.1
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
