"""The FGD paper's unallocated-GPU metric of a replay.

After every arrival the replay records the arrived GPU request (every pod attempted, failed ones
included) and the allocated GPUs, both in milli-GPU. The arrived workload X is
``round(100 * arrived / capacity)``; the unallocated-GPU % at X is 100 minus the mean allocation %
of the samples at X, or of those at X-1 and X+1 when none is exactly at X (None when neither).
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

#: The arrived-workload points (% of GPU capacity) a replay reports.
ARRIVED_POINTS = (50, 80, 90, 100, 110, 120, 130)


class Sample(NamedTuple):
    arrived_milli: int
    used_milli: int


def unallocated_pct_at(samples: list[Sample], capacity_milli: int,
                       points: tuple[int, ...] = ARRIVED_POINTS) -> dict[str, float | None]:
    """``{"100": unallocated %, ...}``, rounded to 3 decimals."""
    by_x: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_x[round(100 * s.arrived_milli / capacity_milli)].append(100 * s.used_milli / capacity_milli)
    out: dict[str, float | None] = {}
    for x in points:
        values = by_x.get(x) or by_x.get(x - 1, []) + by_x.get(x + 1, [])
        out[str(x)] = round(100 - sum(values) / len(values), 3) if values else None
    return out
