"""The largest node of the pool, and KAI's message for a pod bigger than any node (its MaxNodePoolResources).

Each amount is the largest of any node's whole allocatable (:attr:`kai.api.Node.capacity`), so a pod that
no node could ever hold is told so -- with the largest amount there is -- instead of counting every node
as short of resources.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kai.api import Task, is_mig_resource

if TYPE_CHECKING:
    from kai.framework.nodes import NodeInfo

#: The pool a scheduler without node pools reports (KAI's name for an unnamed pool).
DEFAULT_POOL = "default"
STORAGE = ("ephemeral-storage", "storage")
GB = 1e9


def ftoa(value: float, digits: int = 3) -> str:
    """Go's ``humanize.FtoaWithDigits``: at most ``digits`` decimals, trailing zeros dropped."""
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def requirement_text(task: Task) -> str:
    """What a pod asks for, in KAI's words (``GPU: 1, CPU: 2 (cores), memory: 4 (GB), pods: 1``)."""
    req = task.request
    gpus = req.quota_gpus()
    parts = [f"GPU: {ftoa(gpus)}, CPU: {ftoa(req.cpu / 1000)} (cores), memory: {ftoa(req.memory / GB)} (GB)"]
    extended = {**{k: v for k, v in req.scalars.items() if v and not is_mig_resource(k)}, "pods": 1.0}
    for name in sorted(extended):
        value = extended[name]
        parts.append(f"{name}: {ftoa(value / GB)} (GB)" if name in STORAGE else f"{name}: {ftoa(value)}")
    parts.extend(f"mig {name}: {count}" for name, count in sorted(req.mig.items()))
    return ", ".join(parts)


class LargestNode:
    """The largest amount of each resource on a node of ``nodes`` (:class:`kai.framework.nodes.NodeInfo`)."""

    def __init__(self, nodes: Iterable[NodeInfo], pool: str = DEFAULT_POOL) -> None:
        self.pool = pool
        self.cpu = self.memory = self.gpu = 0.0
        self.scalars: dict[str, float] = {}
        for info in nodes:
            node = info.node
            whole = node.capacity if node.capacity is not None else node.allocatable
            self.cpu = max(self.cpu, whole.cpu)
            self.memory = max(self.memory, whole.memory)
            self.gpu = max(self.gpu, whole.gpu)
            for name, value in whole.scalars.items():
                self.scalars[name] = max(self.scalars.get(name, 0.0), value)

    def too_small_for(self, task: Task) -> str | None:
        """KAI's message when no node of the pool could ever hold ``task``, else None."""
        req = task.request
        gpus = req.gpus + req.gpu_fraction * req.gpu_devices
        if gpus > self.gpu:
            return self._message(task, "GPU", self.gpu, "")
        if req.cpu > self.cpu:
            return self._message(task, "CPU", self.cpu / 1000, "cores")
        if req.memory > self.memory:
            return self._message(task, "memory", self.memory / GB, "GB")
        if not (req.scalars or req.mig):
            return None
        for name, value in sorted({**req.scalars, **req.mig}.items()):
            if value > 0 and self.scalars.get(name, 0.0) < value:
                return self._message(task, name, 0.0, "")
        return None

    def _message(self, task: Task, resource: str, largest: float, unit: str) -> str:
        text = f"The pod {task.namespace}/{task.name} requires {requirement_text(task)}. "
        if largest == 0:
            return text + f"No node in the {self.pool} node-pool has {resource} resources"
        text += (f"Max {resource} resources available in a single node in the {self.pool} node-pool is topped at "
                 f"{ftoa(largest)}")
        return f"{text} {unit}" if unit else text
