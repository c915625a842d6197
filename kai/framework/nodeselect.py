"""Node selection for a task: the nodes it fits, those the predicates keep, their order, and why none is left.

A session's :class:`NodeSelector` (``session.selector``) does this work; the session offers its public methods
to actions and plugins under the same names. ``fit_mask`` runs the compiled fit loop over node positions,
``feasible_nodes`` asks ``kai_predicate`` about the fitting ones, ``ordered_nodes`` sums the ``kai_node_scores``
vectors and sorts (ties by node name), and ``node_choices`` gives the same order lazily, from one node per
:mod:`node class <kai.framework.nodeclasses>` when every plugin that looks at nodes treats alike nodes alike.
When no node is left, the reasons are counted into KAI's fit-error message, worked out once per node class.
"""

from __future__ import annotations

import functools
from array import array
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from kai import _native
from kai.api import EPSILON, Job, Task, is_mig_resource
from kai.framework import gpusharing
from kai.framework.asbuilt import nodes_as_built
from kai.framework.nodeclasses import LAYOUT, NodeClasses, node_layout, session_classes
from kai.framework.nodes import NodeInfo

if TYPE_CHECKING:  # the compiled module has the functions of its pure-Python twin
    from kai._native import nodefit_py as nodefit
    from kai.framework.session import Session
else:
    nodefit = _native.load("nodefit")

#: A node that may take the task, and whether it fits the idle resources (else only idle + releasing).
Choice = tuple[NodeInfo, bool]


class NodeSelector:
    """Node selection of one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        #: The call lists the ``kai_nodes_alike`` calls were worked out from, and those calls.
        self._alike: tuple[tuple[object, ...], list[Callable[[Session, Task, Job], bool | None]] | None] = ((), None)

    @functools.cached_property
    def node_classes(self) -> NodeClasses:
        """The session's node classes, built on the first placement that uses them."""
        s = self.session
        layout = nodes_as_built(s, LAYOUT, lambda: node_layout(s.nodes))
        return session_classes(s.nodes, s.arrays, layout, s.snapshot.placed)

    # --- fit ----------------------------------------------------------------------------------------

    def fit_mask(self, task: Task, candidates: array[int]) -> array[int]:
        """Per candidate node position: 0 when ``task`` does not fit idle + releasing resources, else 2 when it
        fits the idle resources too, else 1."""
        s = self.session
        req = task.request
        a = s.arrays
        out = array("b", bytes(len(candidates)))
        nodefit.fit_nodes(a.idle_cpu, a.idle_mem, a.idle_gpu, a.idle_pods, a.rel_cpu, a.rel_mem, a.rel_gpu,
                          a.rel_pods, candidates, req.cpu, req.memory, float(req.gpus), 1.0, out)
        if s.short_scalars:
            for k, fit in enumerate(out):
                if fit and candidates[k] in s.short_scalars:
                    out[k] = self._scalar_room(candidates[k], fit)
        if req.scalars or req.mig:
            for k, fit in enumerate(out):
                if fit:
                    node = s.nodes[candidates[k]]
                    if not node.scalars_fit(task, True):
                        out[k] = 0
                    elif fit == 2 and not node.scalars_fit(task, False):
                        out[k] = 1
        if req.gpu_fraction > 0 or req.gpu_memory_mib > 0:  # a shared-GPU request
            for k, fit in enumerate(out):
                if fit:
                    out[k] = self._shared_fit(task, s.nodes[candidates[k]], fit)
        return out

    def _scalar_room(self, i: int, fit: int) -> int:
        """Narrow the fit on node ``i``, short of an extended resource at the start: 0 while it is short even
        counting releasing amounts, at most 1 while its idle amounts are short."""
        idle, rel = self.session.arrays.idle_scalars[i], self.session.arrays.rel_scalars[i]
        if any(v + rel.get(k, 0.0) < -EPSILON for k, v in idle.items()):
            return 0
        return 1 if fit == 2 and any(v < -EPSILON for v in idle.values()) else fit

    def _shared_fit(self, task: Task, node: NodeInfo, fit: int) -> int:
        """Narrow the CPU/memory/pod fit of a shared-GPU task by its devices and its reservation pod slots."""
        req = task.request
        if req.gpu_memory_mib and not gpusharing.valid_portion(node, req):
            return 0
        a, i = self.session.arrays, node.index
        if node.gpu_groups:
            if not gpusharing.device_count_fits(node, req, True):
                return 0
            if fit == 2 and not gpusharing.device_count_fits(node, req, False):
                fit = 1
        else:  # only free whole devices: no need to look at groups
            if a.idle_gpu[i] + a.rel_gpu[i] + EPSILON < req.gpu_devices:
                return 0
            if fit == 2 and a.idle_gpu[i] + EPSILON < req.gpu_devices:
                fit = 1
        # Every new device needs one more pod slot, for its reservation pod (worked out only when slots are scarce).
        most = 1 + task.request.gpu_devices - EPSILON
        if a.idle_pods[i] + a.rel_pods[i] < most or (fit == 2 and a.idle_pods[i] < most):
            extra = gpusharing.new_groups_needed(self.session, task, node)
            if fit == 2 and a.idle_pods[i] < 1 + extra - EPSILON:
                fit = 1
            if a.idle_pods[i] + a.rel_pods[i] < 1 + extra - EPSILON:
                return 0
        return fit

    # --- predicates and scores ----------------------------------------------------------------------

    def _vet(self, task: Task, job: Job, nodes: Sequence[NodeInfo], fits: array[int], weights: Sequence[int] | None,
             vetoes: Counter[str] | None) -> list[int]:
        """The positions ``k`` of the fitting ``nodes`` (``fits[k]``) that no predicate vetoes; when ``vetoes`` is
        given, each veto is counted there (``weights[k]`` times, else once)."""
        s = self.session
        predicates = s.calls.kai_predicate
        kept: list[int] = []
        for k, fit in enumerate(fits):
            if not fit:
                continue
            node = nodes[k]
            for check in predicates:
                veto = check(s, task, job, node)
                if veto is not None:
                    if vetoes is not None:
                        vetoes[str(veto)] += 1 if weights is None else weights[k]
                    break
            else:
                kept.append(k)
        return kept

    def _scores(self, task: Task, nodes: list[NodeInfo]) -> list[float]:
        """The summed ``kai_node_scores`` of ``nodes``."""
        s = self.session
        total = [0.0] * len(nodes)
        for fn in s.calls.kai_node_scores:
            scores = fn(s, task, nodes)
            if scores is not None:
                for k, score in enumerate(scores):
                    total[k] += score
        return total

    def feasible_nodes(self, task: Task, job: Job, candidates: array[int] | None = None,
                       reasons: Counter[str] | None = None) -> list[Choice]:
        """Nodes where ``task`` fits (idle + releasing) and no predicate vetoes: ``[(node, fits_idle)]``.

        When none is left and ``reasons`` is given, it counts why each node was left out.
        """
        s = self.session
        cand = s.all_candidates if candidates is None else candidates
        fits = self.fit_mask(task, cand)
        every = s.nodes
        nodes = [every[i] for i in cand]
        vetoes: Counter[str] | None = None if reasons is None else Counter()
        kept = self._vet(task, job, nodes, fits, None, vetoes)
        if not kept and reasons is not None:
            reasons.update(vetoes or ())
            self._count_misfits(task, [nodes[k] for k, fit in enumerate(fits) if not fit], reasons)
        return [(nodes[k], fits[k] == 2) for k in kept]

    def ordered_nodes(self, task: Task, job: Job, candidates: array[int] | None = None,
                      reasons: Counter[str] | None = None) -> list[Choice]:
        """Feasible nodes of ``task`` from best to worst: summed plugin scores, ties by node name."""
        feasible = self.feasible_nodes(task, job, candidates, reasons)
        if len(feasible) <= 1 or not self.session.calls.kai_node_scores:
            return feasible
        nodes = [n for n, _ in feasible]
        total = self._scores(task, nodes)
        order = sorted(range(len(nodes)), key=lambda k: (-total[k], nodes[k].sort_key))
        return [feasible[k] for k in order]

    # --- by node class ------------------------------------------------------------------------------

    def node_choices(self, task: Task, job: Job, candidates: array[int] | None = None,
                     reasons: Counter[str] | None = None) -> Iterator[Choice]:
        """The nodes of :meth:`ordered_nodes`, in its order, worked out as the caller asks for them.

        When every plugin with a predicate or node scores treats alike nodes alike for ``task``
        (``kai_nodes_alike``), the best node and, when none fits, the ``reasons`` come from one node per
        node class; the full order is built only if the caller asks past the best node.
        """
        best = self._best_by_class(task, job, candidates, reasons)
        if best is None:
            yield from self.ordered_nodes(task, job, candidates, reasons)
            return
        if not best:
            return
        yield best[0]
        yield from (choice for choice in self.ordered_nodes(task, job, candidates) if choice[0] is not best[0][0])

    def _alike_calls(self) -> list[Callable[[Session, Task, Job], bool | None]] | None:
        """The ``kai_nodes_alike`` calls of the plugins with a predicate or node scores; None when one of those
        plugins does not say."""
        calls = self.session.calls
        seen, found = self._alike
        # The lists are replaced when a plugin withdraws.
        if (seen and seen[0] is calls.kai_predicate and seen[1] is calls.kai_node_scores
                and seen[2] is calls.kai_nodes_alike):
            return found
        self._alike = ((calls.kai_predicate, calls.kai_node_scores, calls.kai_nodes_alike), self._find_alike_calls())
        return self._alike[1]

    def _find_alike_calls(self) -> list[Callable[[Session, Task, Job], bool | None]] | None:
        calls = self.session.calls
        looking = {id(p) for p in calls.owners("kai_predicate") + calls.owners("kai_node_scores")}
        answering = {id(p) for p in calls.owners("kai_nodes_alike")}
        if not looking <= answering:
            return None
        return [fn for fn, p in zip(calls.kai_nodes_alike, calls.owners("kai_nodes_alike"), strict=True)
                if id(p) in looking]

    def _best_by_class(self, task: Task, job: Job, candidates: array[int] | None,
                       reasons: Counter[str] | None) -> list[Choice] | None:
        """``[(best node, fits idle)]`` over one node per class, ``[]`` when no node is feasible (``reasons``
        counted per class), None when the classes cannot be used for ``task``."""
        req = task.request
        if candidates is not None or req.is_shared_gpu or req.scalars or req.mig:
            return None
        alike = self._alike_calls()
        if alike is None:
            return None
        for same in alike:
            if not same(self.session, task, job):
                return None
        reps, positions, sizes = self.node_classes.representatives()
        fits = self.fit_mask(task, positions)
        vetoes: Counter[str] | None = None if reasons is None else Counter()
        kept = self._vet(task, job, reps, fits, sizes, vetoes)
        if not kept:
            if reasons is not None:
                reasons.update(vetoes or ())
                self._add_reasons(task, ((reps[k], sizes[k]) for k, fit in enumerate(fits) if not fit), reasons)
            return []
        if len(kept) == 1:  # one class: its first node wins whatever the scores
            return [(reps[kept[0]], fits[kept[0]] == 2)]
        nodes = [reps[k] for k in kept]
        total = self._scores(task, nodes)
        best = 0
        for j in range(1, len(nodes)):
            if total[j] > total[best] or (total[j] == total[best] and nodes[j].sort_key < nodes[best].sort_key):
                best = j
        return [(nodes[best], fits[kept[best]] == 2)]

    # --- reasons ------------------------------------------------------------------------------------

    def _count_misfits(self, task: Task, misfits: list[NodeInfo], reasons: Counter[str]) -> None:
        """Add why ``task`` fits none of ``misfits``, worked out once per node class (shared-GPU tasks: per node)."""
        if task.request.is_shared_gpu:
            self._add_reasons(task, ((node, 1) for node in misfits), reasons)
            return
        classes: dict[Hashable, list[NodeInfo]] = {}
        key = self.node_classes.key
        for node in misfits:
            classes.setdefault(key(node), []).append(node)
        self._add_reasons(task, ((nodes[0], len(nodes)) for nodes in classes.values()), reasons)

    def _add_reasons(self, task: Task, weighted: Iterable[tuple[NodeInfo, int]], reasons: Counter[str]) -> None:
        """Count why ``task`` does not fit each ``(node, count)``: ``count`` times the node's reasons."""
        for node, count in weighted:
            for text in self.insufficient(node, task):
                reasons[text] += count

    def insufficient(self, node: NodeInfo, task: Task) -> list[str]:
        """KAI's short reasons why ``task`` does not fit ``node``'s idle + releasing resources."""
        free = node.non_allocated
        req = task.request
        res = req.node_resources()
        out = []
        if res.cpu > free.cpu + EPSILON:
            out.append("node(s) didn't have enough resources: CPU cores")
        if res.memory > free.memory + EPSILON:
            out.append("node(s) didn't have enough resources: memory")
        for k, v in res.scalars.items():
            if v > free.scalars.get(k, 0.0) + EPSILON:
                kind = "of mig profile" if is_mig_resource(k) else "resources"
                out.append(f"node(s) didn't have enough {kind}: {k}")
        gpu = []
        if req.is_shared_gpu:
            mib = gpusharing.task_gpu_memory(node, req)
            portion = mib / gpusharing.node_gpu_memory(node) if req.gpu_memory_mib else req.gpu_fraction
            if not gpusharing.device_count_fits(node, req, True) or portion * req.gpu_devices > free.gpu + EPSILON:
                gpu.append("node(s) didn't have enough resources: GPUs")
            if req.gpu_memory_mib > gpusharing.node_gpu_memory(node):
                gpu.append("node(s) didn't have enough resources: GPU memory")
            if req.gpu_memory_mib and not out and gpusharing.valid_portion(node, req):
                gpu = []  # KAI sizes a GPU-memory request by CPU and memory alone: full devices give no reason
        elif res.gpu > free.gpu + EPSILON:
            gpu.append("node(s) didn't have enough resources: GPUs")
        out[:0] = gpu
        slots = 1 + (gpusharing.new_groups_needed(self.session, task, node) if req.is_shared_gpu else 0)
        if node.idle_pods + node.arrays.rel_pods[node.index] < slots - EPSILON:
            out.append("node(s) pod number exceeded")
        if not out and req.gpu_fraction:
            out.append("node(s) didn't have enough resources: GPUs")
        return out
