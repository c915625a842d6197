"""KAI's order of two sibling queues (proportion plugin's DRF comparison), pure Python.

Twin of the compiled ``kai._native.queueorder``: same function, same results.

Each side is given as per-resource vectors of equal length (the proportion plugin uses
(CPU, memory, GPU)): ``fair`` share, ``allocated``, ``request`` of the queue's best job, ``victims``
(what the jobs already chosen as victims hold, or ``None``), ``deserved`` quota and ``limit``
(``-1`` unlimited), and the queue's ``priority``. ``totals`` is what the cluster has of each
resource. The result is ``-1`` when the left queue goes first, ``1`` when the right one does, and
``0`` when every rule ties (the caller then orders by creation time and name).

Rules, first difference wins:

1. a queue above its fair share in every resource goes after one that is not;
2. a queue that stays within its deserved quota with the job goes first;
3. higher priority first;
4. a queue that would use a resource of which its allocatable share is 0 goes last;
5. smaller dominant resource share with the job (minus the victims), 6. without the job;
7. the strictly smaller allocatable-share vector first.

A queue's allocatable share of a resource is its limit when the deserved quota is unlimited, else
``max(deserved, fair)`` capped by the limit. The dominant resource share is the largest
``allocated / allocatable`` over resources, an unlimited allocatable share counting as the
cluster total and a zero one as ``allocated * 1000``.
"""

from __future__ import annotations

from collections.abc import Sequence

UNLIMITED = -1.0
LEFT, TIE, RIGHT = -1, 0, 1
ZERO_SHARE_MULTIPLIER = 1000.0


def compare(l_fair: Sequence[float], l_allocated: Sequence[float], l_request: Sequence[float],
            l_victims: Sequence[float] | None, l_deserved: Sequence[float], l_limit: Sequence[float], l_priority: float,
            r_fair: Sequence[float], r_allocated: Sequence[float], r_request: Sequence[float],
            r_victims: Sequence[float] | None, r_deserved: Sequence[float], r_limit: Sequence[float], r_priority: float,
            totals: Sequence[float]) -> int:
    """-1 when the left queue goes first, 1 when the right one does, 0 on a tie (see the module docstring)."""
    n = len(totals)
    l_with = [l_allocated[r] + l_request[r] for r in range(n)]
    r_with = [r_allocated[r] + r_request[r] for r in range(n)]
    l_over = all(l_fair[r] < l_allocated[r] for r in range(n))
    r_over = all(r_fair[r] < r_allocated[r] for r in range(n))
    result = _prefer(not l_over, not r_over)
    if result:
        return result
    result = _prefer(all(_leq(l_with[r], l_deserved[r]) for r in range(n)),
                     all(_leq(r_with[r], r_deserved[r]) for r in range(n)))
    if result:
        return result
    if l_priority != r_priority:
        return LEFT if l_priority > r_priority else RIGHT
    l_alloc = [_allocatable(l_deserved[r], l_fair[r], l_limit[r]) for r in range(n)]
    r_alloc = [_allocatable(r_deserved[r], r_fair[r], r_limit[r]) for r in range(n)]
    l_zero = any(l_alloc[r] == 0 and l_with[r] > 0 for r in range(n))
    r_zero = any(r_alloc[r] == 0 and r_with[r] > 0 for r in range(n))
    result = _prefer(not l_zero, not r_zero)
    if result:
        return result
    l_share = _dominant(_minus(l_with, l_victims), l_alloc, totals)
    r_share = _dominant(_minus(r_with, r_victims), r_alloc, totals)
    if l_share != r_share:
        return LEFT if l_share < r_share else RIGHT
    l_share, r_share = _dominant(l_allocated, l_alloc, totals), _dominant(r_allocated, r_alloc, totals)
    if l_share != r_share:
        return LEFT if l_share < r_share else RIGHT
    if l_alloc != r_alloc:
        if all(_leq(a, b) for a, b in zip(l_alloc, r_alloc)):
            return LEFT
        if all(_leq(b, a) for a, b in zip(l_alloc, r_alloc)):
            return RIGHT
    return TIE


def _prefer(left_flag: bool, right_flag: bool) -> int:
    if left_flag and not right_flag:
        return LEFT
    if right_flag and not left_flag:
        return RIGHT
    return TIE


def _leq(a: float, b: float) -> bool:
    """``a <= b`` where -1 is unlimited (larger than any amount)."""
    if a == UNLIMITED:
        return b == UNLIMITED
    return b == UNLIMITED or a <= b


def _allocatable(deserved: float, fair: float, limit: float) -> float:
    if deserved == UNLIMITED:
        return limit
    value = max(deserved, fair)
    return value if limit == UNLIMITED else min(limit, value)


def _minus(amounts: Sequence[float], victims: Sequence[float] | None) -> Sequence[float]:
    if victims is None:
        return amounts
    return [a - v for a, v in zip(amounts, victims)]


def _dominant(allocated: Sequence[float], allocatable: Sequence[float], totals: Sequence[float]) -> float:
    share = 0.0
    for r in range(len(totals)):
        alloc = totals[r] if allocatable[r] == UNLIMITED else allocatable[r]
        value = allocated[r] * ZERO_SHARE_MULTIPLIER if alloc == 0 else allocated[r] / alloc
        share = max(share, value)
    return share
