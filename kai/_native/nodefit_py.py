"""Pure-Python twin of ``nodefit.pyx``: the resource-fit and placement-score loops of allocate.

All arrays are indexed by node position in the session; ``candidates`` lists the node positions to
look at. Quantities are the scheduler's units (CPU millicores, memory bytes, GPUs, pod slots).
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence

EPS = 1e-9


def fit_nodes(idle_cpu: Sequence[float], idle_mem: Sequence[float], idle_gpu: Sequence[float],
              idle_pods: Sequence[float], rel_cpu: Sequence[float], rel_mem: Sequence[float],
              rel_gpu: Sequence[float], rel_pods: Sequence[float], candidates: Sequence[int],
              cpu: float, mem: float, gpu: float, pods: float, out: MutableSequence[int]) -> int:
    """Write for each candidate k: 0 if the request does not fit the node's idle + releasing resources
    (releasing may be negative once pipelined tasks took more than was releasing), else 2 if it fits
    the idle resources too, else 1, into ``out[k]``. Return how many fit at all."""
    fitting = 0
    for k in range(len(candidates)):
        i = candidates[k]
        if (cpu <= idle_cpu[i] + rel_cpu[i] + EPS and mem <= idle_mem[i] + rel_mem[i] + EPS
                and gpu <= idle_gpu[i] + rel_gpu[i] + EPS and pods <= idle_pods[i] + rel_pods[i] + EPS):
            fitting += 1
            if (cpu <= idle_cpu[i] + EPS and mem <= idle_mem[i] + EPS and gpu <= idle_gpu[i] + EPS
                    and pods <= idle_pods[i] + EPS):
                out[k] = 2
            else:
                out[k] = 1
        else:
            out[k] = 0
    return fitting


def placement_scores(non_allocated: Sequence[float], totals: Sequence[float], spread: bool, max_score: float,
                     out: MutableSequence[float]) -> None:
    """Score nodes by one resource for bin-packing or spreading; results into ``out``.

    ``non_allocated[k]`` is the node's idle + releasing amount, ``totals[k]`` its total (a node with
    total 0 lacks the resource and scores 0). Binpack: ``max_score * (1 - (v - min) / (max - min))``
    over the nodes that have the resource (``max_score`` when all are equal, 0 when none has any
    left). Spread: ``max_score * v / total``.
    """
    n = len(non_allocated)
    if spread:
        for k in range(n):
            out[k] = max_score * non_allocated[k] / totals[k] if totals[k] > 0 else 0.0
        return
    lo = hi = 0.0
    seen = False
    for k in range(n):
        if totals[k] > 0:
            v = non_allocated[k]
            if not seen:
                lo = hi = v
                seen = True
            elif v < lo:
                lo = v
            elif v > hi:
                hi = v
    for k in range(n):
        if totals[k] <= 0 or hi <= 0:
            out[k] = 0.0
        elif hi == lo:
            out[k] = max_score
        else:
            out[k] = max_score * (1.0 - (non_allocated[k] - lo) / (hi - lo))
