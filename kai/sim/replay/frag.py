"""The FGD paper's GPU fragmentation of a replay's cluster (Weng et al., USENIX ATC'23, section 3).

The target workload is the trace's typical pod shapes: the pods grouped by (CPU, GPU milli per device,
GPU count, accepted models), memory ignored, the most frequent shapes kept until they cover 95 % of the
pods, their frequencies renormalised. For a node with idle GPU milli ``g_i`` per device and ``cpu`` free
millicores, a shape's fragment is every idle GPU milli when the shape asks no GPU, may not use the node's
model, or finds fewer than ``num_gpu`` devices with ``gpu_milli`` free or too little CPU; otherwise only the
devices with less than ``gpu_milli`` free. The cluster's fragmentation is the probability-weighted sum over
shapes and nodes. Nodes in the same state share one computation.
"""

from __future__ import annotations

from collections import Counter

from kai.framework import Session
from kai.framework.gpusharing import node_gpu_memory
from kai.sim.replay.trace import GPU_MODEL_LABEL, TracePod

#: Share of the trace's pods the typical shapes cover.
COVERAGE = 0.95

#: (cpu milli, gpu milli per device, GPU count, accepted models) of a typical pod.
Shape = tuple[float, int, int, tuple[str, ...]]


def typical_shapes(pods: list[TracePod], coverage: float = COVERAGE) -> list[tuple[Shape, float]]:
    """The most frequent pod shapes covering ``coverage`` of ``pods``, with their renormalised frequencies."""
    counts = Counter((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods)
    kept: list[tuple[Shape, int]] = []
    covered = 0
    for shape, n in sorted(counts.items(), key=lambda kv: (-kv[1], repr(kv[0]))):
        if covered >= coverage * len(pods):
            break
        kept.append((shape, n))
        covered += n
    return [(shape, n / covered) for shape, n in kept]


class Fragmentation:
    """Measures the fragmentation of a session's nodes for the typical shapes of a trace."""

    def __init__(self, pods: list[TracePod]) -> None:
        self.shapes = typical_shapes(pods)
        self._cache: dict[tuple, float] = {}

    def node(self, free: tuple[int, ...], cpu: float, model: str) -> float:
        """Expected fragment (GPU milli) of a node with ``free`` GPU milli per device and ``cpu`` millicores."""
        key = (free, cpu, model)
        found = self._cache.get(key)
        if found is not None:
            return found
        idle = sum(free)
        out = 0.0
        for (s_cpu, s_milli, s_num, s_models), p in self.shapes:
            if (not s_milli or (s_models and model not in s_models) or cpu < s_cpu
                    or sum(1 for g in free if g >= s_milli) < s_num):
                out += p * idle
            else:
                out += p * sum(g for g in free if g < s_milli)
        self._cache[key] = out
        return out

    def measure(self, session: Session) -> tuple[float, float]:
        """(fragment, idle) GPU milli of the session's nodes."""
        a = session.arrays
        frag = idle = 0.0
        for node in session.nodes:
            i = node.index
            free = [1000] * int(a.idle_gpu[i] + 1e-9)
            if node.gpu_groups:
                mem = node_gpu_memory(node)
                free += [round(1000 * (1 - g.used / mem)) for g in node.gpu_groups.values() if 0 < g.used < mem]
            if not free:
                continue
            t = tuple(sorted(free))
            idle += sum(t)
            frag += self.node(t, a.idle_cpu[i], node.labels.get(GPU_MODEL_LABEL, ""))
        return frag, idle
