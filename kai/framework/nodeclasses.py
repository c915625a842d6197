"""Node classes: the nodes of a session grouped by what a class-safe plugin may look at.

Two nodes are in one class when they have the same allocatable, idle and releasing amounts and pod
slots, the same schedulability, readiness, NoSchedule/NoExecute taints and GPU-count label, and
neither has extended resources (MIG profiles, other scalars) or shared GPU devices -- such a node is
a class of its own. When every plugin says it treats alike nodes alike for a task
(``kai_nodes_alike``), the kernel filters and scores one node per class, the first by name, which
makes the per-task work grow with the number of classes instead of the number of nodes.

The index is kept current lazily: :class:`~kai.framework.nodes.NodeArrays` records the nodes whose
amounts changed, and :meth:`NodeClasses.representatives` moves only those between classes; the
representatives are worked out again only for the classes a move touched. The classes of a node accounting
that sessions copy (a snapshot's kept one, brought up to date from snapshot to snapshot) are kept with it, and
a session's classes are a copy of them (:func:`session_classes`): a session moves only the nodes it or the
accounting changed since, not every node.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Hashable

from kai.api import names
from kai.framework.memo import MemoKey
from kai.framework.nodes import NodeArrays, NodeInfo

_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def _static_key(node: NodeInfo) -> Hashable | None:
    """What of the node does not change in a session and may be looked at; None when the node has extended
    resources (it is a class of its own)."""
    n = node.node
    if n.allocatable.scalars:
        return None
    taints = tuple(sorted((t.key, t.value, t.effect) for t in n.taints if t.effect in _TAINT_EFFECTS))
    return (n.allocatable.cpu, n.allocatable.memory, n.allocatable.gpu, n.max_pods, n.unschedulable, n.ready, taints,
            n.labels.get(names.GPU_COUNT_LABEL))


#: Node positions in name order, each position's rank in that order, and the number of its static key (-1:
#: the node is a class of its own); the same for every session on the same nodes (:func:`node_layout`).
Layout = tuple[list[int], "array[int]", list[int]]
#: The memo key of the nodes' :data:`Layout` (:func:`~kai.framework.asbuilt.nodes_as_built`).
LAYOUT: MemoKey[Layout] = MemoKey("node-classes/layout")


def node_layout(nodes: list[NodeInfo]) -> Layout:
    """The :data:`Layout` of ``nodes``: what of the node classes depends on the nodes alone."""
    order = sorted(range(len(nodes)), key=lambda i: nodes[i].sort_key)
    rank = array("i", bytes(4 * len(nodes)))
    for r, i in enumerate(order):
        rank[i] = r
    statics: dict[Hashable, int] = {}
    static = [-1 if (s := _static_key(n)) is None else statics.setdefault(s, len(statics)) for n in nodes]
    return order, rank, static


class NodeClasses:
    """The classes of a session's nodes, each a set of name ranks (positions in name order) with a heap of
    them that may hold ranks which left the class (dropped when they reach the top).

    A class is known by a number given to its key when the key is first seen; the static part of a key
    is numbered too, so a key is a flat tuple that hashes quickly.
    """

    def __init__(self, nodes: list[NodeInfo], arrays: NodeArrays, layout: Layout | None = None):
        #: What of the classes depends on the nodes alone.
        self.layout = layout if layout is not None else node_layout(nodes)
        order, self.rank, self.static = self.layout
        #: Nodes in name (byte) order; a class holds the ranks of its nodes in this list.
        self.by_rank = [nodes[i] for i in order]
        self.nodes, self.arrays = nodes, arrays
        #: Numbers of the classes that have nodes, by key, and their keys; the class of each node position
        #: (-1: none yet).
        self.ids: dict[Hashable, int] = {}
        self.keys: dict[int, Hashable] = {}
        self.numbered = 0
        self.class_of = [-1] * len(nodes)
        self.members: dict[int, set[int]] = {}
        self.heaps: dict[int, list[int]] = {}
        #: The representatives of the classes as last worked out, by class; None when not worked out yet.
        self._reps: dict[int, tuple[NodeInfo, int]] | None = None
        arrays.changed.update(range(len(nodes)))

    def _key(self, i: int) -> Hashable:
        static = self.static[i]
        a = self.arrays
        if static < 0 or a.rel_scalars[i] or a.idle_scalars[i] or self.nodes[i].gpu_groups:
            return ("node", i)
        return (static, a.idle_cpu[i], a.idle_mem[i], a.idle_gpu[i], a.idle_pods[i], a.rel_cpu[i], a.rel_mem[i],
                a.rel_gpu[i], a.rel_pods[i])

    def _refresh(self) -> None:
        changed = self.arrays.changed
        ids, members, heaps, reps = self.ids, self.members, self.heaps, self._reps
        for i in changed:
            key = self._key(i)
            new = ids.get(key)
            if new is None:
                new = ids[key] = self.numbered
                self.keys[new] = key
                self.numbered += 1
            old = self.class_of[i]
            if old == new:
                continue
            r = self.rank[i]
            if old >= 0:
                left = members[old]
                left.discard(r)
                if not left:
                    del members[old], heaps[old], ids[self.keys.pop(old)]
                if reps is not None:
                    reps.pop(old, None)
            joined = members.get(new)
            if joined is None:
                members[new], heaps[new] = {r}, [r]
            else:
                joined.add(r)
                heap = heaps[new]
                if len(heap) > 2 * len(joined) + 8:  # mostly ranks that left: a sorted list is a heap
                    heaps[new] = sorted(joined)
                else:
                    heapq.heappush(heap, r)
            if reps is not None:
                reps.pop(new, None)
            self.class_of[i] = new
        changed.clear()

    def copy(self, nodes: list[NodeInfo], arrays: NodeArrays) -> NodeClasses:
        """These classes as they are now, over ``nodes`` and ``arrays`` -- copies of the nodes and amounts they
        were worked out from -- kept current from the nodes whose amounts ``arrays`` records as changed."""
        if self.arrays.changed:
            self._refresh()
        other = NodeClasses.__new__(NodeClasses)
        other.layout, other.rank, other.static = self.layout, self.rank, self.static
        other.by_rank = [nodes[i] for i in self.layout[0]]
        other.nodes, other.arrays = nodes, arrays
        other.ids, other.keys, other.numbered = dict(self.ids), dict(self.keys), self.numbered
        other.class_of = list(self.class_of)
        other.members = {c: set(members) for c, members in self.members.items()}
        other.heaps = {c: list(heap) for c, heap in self.heaps.items()}
        other._reps = None
        return other

    def representatives(self) -> tuple[list[NodeInfo], array[int], list[int]]:
        """The first node by name of every class, its position, and the size of its class."""
        if self.arrays.changed:
            self._refresh()
        if self._reps is None:
            self._reps = {}
        known, by_rank = self._reps, self.by_rank
        reps, sizes = [], []
        for c, members in self.members.items():
            rep = known.get(c)
            if rep is None:
                heap = self.heaps[c]
                while heap[0] not in members:
                    heapq.heappop(heap)
                rep = known[c] = (by_rank[heap[0]], len(members))
            reps.append(rep[0])
            sizes.append(rep[1])
        return reps, array("i", [n.index for n in reps]), sizes

    def key(self, node: NodeInfo) -> Hashable:
        """The class of ``node`` as it is now."""
        self._refresh()
        return self.class_of[node.index]


def session_classes(nodes: list[NodeInfo], arrays: NodeArrays, layout: Layout,
                    kept: tuple[NodeArrays, list[NodeInfo]] | None) -> NodeClasses:
    """The classes of a session's ``nodes`` and ``arrays``; when they are a copy of the ``kept`` accounting, a copy
    of the classes kept with it (worked out on first use, and again when the nodes' ``layout`` is another)."""
    if kept is None:
        return NodeClasses(nodes, arrays, layout)
    kept_arrays, kept_nodes = kept
    classes = kept_arrays.classes
    if classes is None or classes.layout is not layout:
        classes = kept_arrays.classes = NodeClasses(kept_nodes, kept_arrays, layout)
    return classes.copy(nodes, arrays)
