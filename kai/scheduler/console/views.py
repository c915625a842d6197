"""What the console's pages show, worked out from the visibility API's JSON answers and the loop's cycle summaries:
the queue tree, the GPU map of the nodes and the bars and charts drawn in SVG (coordinates here, markup in the
templates). Pure functions of their inputs; nothing here reaches a cycle's objects."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from kai.scheduler.loop import CycleSummary

#: Width of a queue's bar, SVG user units.
BAR_WIDTH = 240.0
#: GPU cells per row of a node in the GPU map.
CELLS_PER_ROW = 8


@attrs.frozen
class Mark:
    """A tick on a bar at ``x`` (SVG units) for ``label`` (deserved, fair share, limit) of ``amount``."""

    label: str
    x: float
    amount: float


@attrs.frozen
class Bar:
    """A queue's GPU bar: what it requested and has allocated as lengths, its quotas as ticks."""

    requested: float
    allocated: float
    marks: tuple[Mark, ...]


@attrs.frozen
class QueueRow:
    """A queue in the tree: its depth, its JSON (``resources`` per resource), its pending jobs and GPU bar."""

    depth: int
    queue: dict[str, Any]
    pending: int
    bar: Bar


def queue_tree(queues: Sequence[dict[str, Any]], pending: dict[str, int]) -> list[QueueRow]:
    """The queues depth first from the roots, children by name; a queue whose parent is not listed is a root."""
    names = {q["name"] for q in queues}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for q in queues:
        children.setdefault(q["parent"] if q["parent"] in names else None, []).append(q)
    rows: list[QueueRow] = []
    stack = [(0, q) for q in sorted(children.get(None, []), key=lambda q: q["name"], reverse=True)]
    while stack:
        depth, q = stack.pop()
        rows.append(QueueRow(depth, q, pending.get(q["name"], 0), gpu_bar(q["resources"]["gpu"])))
        stack += [(depth + 1, c) for c in sorted(children.get(q["name"], []), key=lambda c: c["name"], reverse=True)]
    return rows


def gpu_bar(gpu: dict[str, float]) -> Bar:
    """The bar of a queue's GPUs, scaled to its largest amount (a limit of -1, unlimited, is left out)."""
    amounts = {"deserved": gpu["deserved"], "fair share": gpu["fair_share"], "limit": gpu["limit"]}
    shown = {k: v for k, v in amounts.items() if v >= 0}
    top = max([gpu["allocated"], gpu["requested"], *shown.values()], default=0.0)
    scale = BAR_WIDTH / top if top > 0 else 0.0
    return Bar(gpu["requested"] * scale, gpu["allocated"] * scale,
               tuple(Mark(k, min(v * scale, BAR_WIDTH - 1), v) for k, v in shown.items()))


@attrs.frozen
class NodeMap:
    """A node's GPUs in the map, as counts of cells: whole GPUs in use, shared GPUs (``shared_used``: the part of
    them in use), free GPUs of an idle node and free GPUs of a node partly in use (fragmented)."""

    name: str
    node_pool: str
    gpus: int
    used: int
    shared: int
    shared_used: float
    free: int
    fragmented: int

    def cells(self) -> list[tuple[str, int, int]]:
        """(kind, column, row) of each GPU, in use first."""
        kinds = (["used"] * self.used + ["shared"] * self.shared + ["free"] * self.free
                 + ["fragmented"] * self.fragmented)
        return [(k, i % CELLS_PER_ROW, i // CELLS_PER_ROW) for i, k in enumerate(kinds)]


def node_map(node: dict[str, Any]) -> NodeMap:
    gpus = round(node["allocatable"]["gpu"])
    free = min(round(node["free_whole_gpus"]), gpus)
    shared = min(node["shared_gpu_groups"], gpus - free)
    used = gpus - free - shared
    shared_used = max(shared - node["free_shared_gpus"], 0.0)
    busy = used + shared > 0
    return NodeMap(node["name"], node["node_pool"], gpus, used, shared, shared_used,
                   0 if busy else free, free if busy else 0)


@attrs.frozen
class PoolSummary:
    """A node pool's GPUs in total: nodes, GPUs, and GPUs in use, shared, free and fragmented (as in :class:`NodeMap`),
    with the free parts of shared GPUs."""

    name: str
    nodes: int = 0
    gpus: int = 0
    used: int = 0
    shared: int = 0
    shared_free: float = 0.0
    free: int = 0
    fragmented: int = 0

    def add(self, node: dict[str, Any]) -> PoolSummary:
        m = node_map(node)
        return PoolSummary(self.name, self.nodes + 1, self.gpus + m.gpus, self.used + m.used, self.shared + m.shared,
                           self.shared_free + max(m.shared - m.shared_used, 0.0), self.free + m.free,
                           self.fragmented + m.fragmented)

    def segments(self) -> list[tuple[str, float, float, int]]:
        """(kind, x, width, GPUs) of the pool's stacked bar, :data:`BAR_WIDTH` wide."""
        out, x = [], 0.0
        for kind, n in (("used", self.used), ("shared", self.shared), ("free", self.free),
                        ("fragmented", self.fragmented)):
            width = BAR_WIDTH * n / self.gpus if self.gpus else 0.0
            out.append((kind, x, width, n))
            x += width
        return out


def pools(nodes: Iterable[dict[str, Any]]) -> list[PoolSummary]:
    """Each node pool's summary, by name."""
    found: dict[str, PoolSummary] = {}
    for node in nodes:
        pool = node["node_pool"]
        found[pool] = found.get(pool, PoolSummary(pool)).add(node)
    return [found[k] for k in sorted(found)]


@attrs.frozen
class CycleBar:
    """A cycle in the chart of recent cycles: its bar's x, height and whether it failed or decided something."""

    summary: CycleSummary
    x: float
    height: float
    failed: bool
    decided: bool


#: The chart of recent cycles: height of the tallest bar and width of each, SVG units.
CHART_HEIGHT, CHART_BAR = 120.0, 10.0


def cycle_chart(recent: Sequence[CycleSummary]) -> list[CycleBar]:
    """The bars of ``recent`` (oldest first), heights scaled to the longest cycle."""
    longest = max((c.seconds for c in recent), default=0.0)
    return [CycleBar(c, i * (CHART_BAR + 2), max(CHART_HEIGHT * c.seconds / longest, 1.0) if longest else 1.0,
                     c.error != "", c.binds + c.pipelined + c.evictions > 0)
            for i, c in enumerate(recent)]
