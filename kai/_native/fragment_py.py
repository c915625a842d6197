"""Expected GPU fragmentation of a node over a workload of task shapes (the ``fragmentation`` plugin's
measure), pure Python.

Twin of the compiled ``kai._native.fragment``: same class, same results bit for bit. Sums run left to
right from zero and every comparison, ``min``, ``max`` and floor division is Python's, so the compiled
loop can repeat them exactly.

A workload is given once as *needs* -- what a shape asks of a node's devices, shared by shapes that
differ in CPU or memory only -- and *shapes*:

* a need is ``(kind, amount, slices)``: ``WHOLE`` with ``amount`` whole GPUs, ``MIG`` with ``amount`` a MIG
  profile resource name of ``slices`` GPU slices, ``FRACTION`` with ``amount`` the fraction of a device,
  or ``GPU_MEMORY`` with ``amount`` MiB of a device (a fraction of the node's device memory);
* a shape is ``(need, probability, cpu, memory, models)``: the index of its need, its probability, the
  CPU and memory one task asks and the GPU models it may run on (empty: any). CPU-only shapes are left
  out: they use no GPU and add nothing.

For each shape the measure adds, weighted by its probability, the free GPU the next task of the shape
could not use (all of it when the task does not fit, else what the devices it cannot go to hold), and
``lookahead`` times the free GPU left once the node is filled with tasks of the shape as far as its
devices, CPU and memory allow; and, when the node's CPU or memory cannot hold one more task of the shape,
``stranded`` times the free parts of shared devices big enough for it (GPU the node's CPU or memory strands).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

EPS = 1e-9
WHOLE, MIG, FRACTION, GPU_MEMORY = 0, 1, 2, 3


class Measure:
    """The measure for one workload; call it with a node's free amounts."""

    def __init__(self, needs: Sequence[tuple[int, Any, float]],
                 shapes: Sequence[tuple[int, float, float, float, Iterable[str]]], lookahead: float,
                 stranded: float = 0.0):
        self.needs = [tuple(n) for n in needs]
        self.shapes = [(int(k), float(p), float(p) * lookahead, float(p) * stranded, float(c), float(m),
                        frozenset(models)) for k, p, c, m, models in shapes]
        self.lookahead = float(lookahead)
        self.stranded = float(stranded)
        for k, *_ in self.shapes:
            if not 0 <= k < len(self.needs):
                raise ValueError(f"shape names need {k}, not one of the {len(self.needs)} given")

    def __call__(self, whole: float, slivers: Sequence[float], mig: Sequence[tuple[str, float]], mig_gpus: float,
                 model: str, cpu: float, memory: float, device_memory: float) -> float:
        """The node's expected fragmentation in GPUs: ``whole`` free devices, the free parts of its shared
        devices (``slivers``), free MIG instances by profile (``mig``, ``mig_gpus`` GPUs in all), its GPU model,
        free CPU and memory, and the memory of each device (MiB; 0 when unknown)."""
        sliver_sum = 0.0
        for s in slivers:
            sliver_sum += s
        total = whole + sliver_sum + mig_gpus
        if total <= EPS:
            return 0.0
        # Per need: the next task's fragment when CPU and memory allow it, how many tasks the devices take, the
        # GPU each takes and the free parts of shared devices big enough for one; None when no device can take one.
        parts: list[tuple[float, float, float, float] | None] = []
        for kind, amount, slices in self.needs:
            if kind == WHOLE:
                parts.append((total - whole if whole >= amount - EPS else total, whole // amount, float(amount), 0.0))
            elif kind == MIG:
                count = 0.0
                for profile, n in mig:
                    if profile == amount:
                        count = n
                        break
                parts.append((total - slices * count if count >= 1 else total, count, float(slices), 0.0))
            else:
                if kind == FRACTION:
                    f = amount
                else:
                    f = amount / device_memory if device_memory else 2.0
                if f > 1 + EPS:
                    parts.append(None)
                    continue
                smallest = f - EPS
                small = 0.0
                for s in slivers:
                    if s < smallest:
                        small += s
                now = total if whole < 1 - EPS and small >= sliver_sum - EPS else small + mig_gpus
                count = whole * math.floor((1 + EPS) / f)
                tasks = 0
                for s in slivers:
                    tasks += math.floor((s + EPS) / f)
                parts.append((now, count + tasks, f, sliver_sum - small))
        cpu, memory = cpu + EPS, memory + EPS
        lookahead = self.lookahead
        out = 0.0
        for k, p, pl, ps, c, m, models in self.shapes:
            part = parts[k]
            if part is None or (models and model not in models):
                out += p * total
                if lookahead:
                    out += pl * total
                continue
            now, count, per_task, fitting = part
            if c <= cpu and m <= memory:
                out += p * now
            else:
                out += p * total
                if fitting:
                    out += ps * fitting
            if lookahead:
                if c > 0:
                    count = min(count, cpu // c)
                if m > 0:
                    count = min(count, memory // m)
                out += pl * (total - max(count, 0.0) * per_task)
        return out
