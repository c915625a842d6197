"""The fragmentation measure run by the compiled kernel ``kai._native.fragment`` (or its pure-Python twin)."""

from __future__ import annotations

from collections.abc import Iterable

from kai.sdk import NodeState, Shape, fragment, mig_gpu_slices

from .measure import DEFAULT_LOOKAHEAD, DEFAULT_STRANDED


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
