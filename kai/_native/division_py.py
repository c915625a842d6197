"""Fair-share division of one resource over a queue tree (KAI's ``resource_division``), pure Python.

Twin of the compiled ``kai._native.division``: same functions, same results bit for bit.

Every function takes one resource at a time (call once per GPU, CPU, memory) and plain per-queue
sequences of equal length, indexed by queue:

* ``deserved``: quota; ``-1`` means "everything requested" (the amount being divided).
* ``max_allowed``: limit; ``-1`` means unlimited.
* ``over_quota_weight``: share of the over-quota remainder; ``0`` gets no over-quota.
* ``priority``: queue priority (int); higher buckets take the over-quota remainder first.
* ``request``: what the queue's subtree asks for (allocated plus pending).
* ``usage``: historical usage normalised to the cluster capacity (0 without usage data).
* ``rank``: creation order (int), smaller is older. Encode KAI's tie-break (creation time, then
  UID) in it. Siblings are visited in ``(rank, index)`` order wherever KAI iterates a Go map; in KAI
  that order only changes the last bits of floating-point sums.

Amounts are in the caller's unit (GPU devices, CPU millicores, memory bytes) as finite floats or
ints; results are floats. ``k_value`` (>= 0) scales the historical-usage term.

Per set of siblings sharing ``total``:

1. each queue gets ``min(deserved, requestable)`` with ``requestable = min(max_allowed, request)``,
   even when the sum exceeds ``total`` (over-subscribed quotas); nothing else is given then;
2. the remainder goes to priority buckets, highest first; inside a bucket in rounds, each
   unsatisfied queue of non-zero weight getting ``floor(remainder * w / sum(w))`` where ``w`` is
   ``max(0, nw + k_value * (nw - usage))`` and ``nw`` its weight over the bucket's weights still
   requesting; a queue asking for less takes what it asks for and frees the rest for another round;
3. what the floors left over is handed out one unit (or the last fraction) at a time, bucket by
   bucket, to the queues with the largest rounded-off fraction first (ties: ``rank``, index).

KAI's consequences, kept as they are: what a bucket's floors leave reaches the rounds of the lower
buckets before any rounding phase; the rounding phase checks neither request nor limit, so a
fractional request or limit can be exceeded by less than one unit (whole-number quotas and limits
are never exceeded); with ``k_value > 0`` a bucket whose queues all have high usage gets nothing.

``divide_tree_explained`` also returns, per queue, the rule that bounded its fair share at its own
level (one of the ``REASON_*`` codes; :data:`REASONS` has their texts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

UNLIMITED = -1.0

#: Why a queue's fair share is what it is (codes returned by ``divide_tree_explained``).
REASON_REQUESTED = 0       # it got everything it asks for
REASON_LIMIT = 1           # its limit stops it below what it asks for
REASON_DESERVED_ONLY = 2   # the siblings' deserved quotas used up the amount: no over-quota at this level
REASON_NO_WEIGHT = 3       # over-quota weight 0: deserved quota only
REASON_OVER_QUOTA = 4      # its weighted part of the over-quota remainder
REASON_USAGE = 5           # its weighted part, made smaller by its past usage
REASON_HIGHER_PRIORITY = 6  # siblings of higher queue priority took the over-quota remainder
REASONS = (
    "requested (got all it asked)",
    "limit",
    "deserved only: parent exhausted",
    "deserved only: over-quota weight 0",
    "over-quota weight share",
    "over-quota weight share, reduced by past usage",
    "higher-priority sibling took the rest",
)


def divide_level(
    total: float,
    deserved: Sequence[float],
    max_allowed: Sequence[float],
    over_quota_weight: Sequence[float],
    priority: Sequence[int],
    request: Sequence[float],
    usage: Sequence[float],
    rank: Sequence[int],
    k_value: float = 0.0,
) -> list[float]:
    """Divide ``total`` among one set of sibling queues; return each queue's fair share.

    All sequences have one entry per sibling (see the module docstring for their meaning).
    """
    q = _Queues(deserved, max_allowed, over_quota_weight, priority, request, usage, rank, k_value)
    members = sorted(range(q.n), key=lambda i: (q.rank[i], i))
    _divide(q, float(total), members)
    return q.fs


def divide_tree(
    total: float,
    parent: Sequence[int],
    deserved: Sequence[float],
    max_allowed: Sequence[float],
    over_quota_weight: Sequence[float],
    priority: Sequence[int],
    request: Sequence[float],
    usage: Sequence[float],
    rank: Sequence[int],
    k_value: float = 0.0,
) -> list[float]:
    """Divide ``total`` over a forest of queues level by level; return each queue's fair share.

    ``parent[i]`` is the index of queue ``i``'s parent, ``-1`` for a top-level queue. The top-level
    queues share ``total``; the children of a queue share that queue's fair share. Raises
    ``ValueError`` on sequences of unequal length, a parent index out of range, or a cycle.
    """
    return divide_tree_explained(total, parent, deserved, max_allowed, over_quota_weight, priority, request, usage,
                                 rank, k_value)[0]


def divide_tree_explained(
    total: float,
    parent: Sequence[int],
    deserved: Sequence[float],
    max_allowed: Sequence[float],
    over_quota_weight: Sequence[float],
    priority: Sequence[int],
    request: Sequence[float],
    usage: Sequence[float],
    rank: Sequence[int],
    k_value: float = 0.0,
) -> tuple[list[float], list[int]]:
    """``divide_tree`` plus, per queue, the ``REASON_*`` code of the rule that bounded its fair share."""
    q = _Queues(deserved, max_allowed, over_quota_weight, priority, request, usage, rank, k_value)
    n = q.n
    if len(parent) != n:
        raise ValueError("parent: length differs from deserved")
    children: list[list[int]] = [[] for _ in range(n)]
    roots = []
    for i in sorted(range(n), key=lambda i: (q.rank[i], i)):
        p = int(parent[i])
        if p == -1:
            roots.append(i)
        elif 0 <= p < n and p != i:
            children[p].append(i)
        else:
            raise ValueError(f"parent[{i}] = {p} is not a queue index or -1")
    _divide(q, float(total), roots)
    reached = len(roots)
    level = roots
    while level:
        below = []
        for i in level:
            if children[i]:
                _divide(q, q.fs[i], children[i])
                below.extend(children[i])
        reached += len(below)
        level = below
    if reached != n:
        raise ValueError("parent links form a cycle")
    return q.fs, q.reason


class _Queues:
    """Inputs converted to floats/ints, plus the fair shares being built."""

    def __init__(self, deserved: Sequence[float], max_allowed: Sequence[float], over_quota_weight: Sequence[float],
                 priority: Sequence[int], request: Sequence[float], usage: Sequence[float], rank: Sequence[int],
                 k_value: float) -> None:
        self.n = n = len(deserved)
        named = {
            "max_allowed": max_allowed,
            "over_quota_weight": over_quota_weight,
            "priority": priority,
            "request": request,
            "usage": usage,
            "rank": rank,
        }
        for name, values in named.items():
            if len(values) != n:
                raise ValueError(f"{name}: length differs from deserved")
        self.deserved = [float(x) for x in deserved]
        self.limit = [float(x) for x in max_allowed]
        self.weight = [float(x) for x in over_quota_weight]
        self.priority = [int(x) for x in priority]
        self.request = [float(x) for x in request]
        self.usage = [float(x) for x in usage]
        self.rank = [int(x) for x in rank]
        self.k = float(k_value)
        self.fs = [0.0] * n
        self.reason = [REASON_REQUESTED] * n

    def requestable(self, i: int) -> float:
        limit = self.limit[i]
        return self.request[i] if limit == UNLIMITED else min(limit, self.request[i])

    def remaining_requested(self, i: int) -> float:
        requestable, fs = self.requestable(i), self.fs[i]
        return 0.0 if requestable < fs else requestable - fs

    def satisfied(self, i: int) -> bool:
        fs, limit = self.fs[i], self.limit[i]
        return self.request[i] <= fs or (limit != UNLIMITED and limit <= fs)


def _divide(q: _Queues, total: float, members: list[int]) -> None:
    """Add to ``q.fs`` the shares of ``members`` (in creation order) in ``total``; set their reasons."""
    remaining = total
    for i in members:
        deserved = total if q.deserved[i] == UNLIMITED else q.deserved[i]
        give = min(deserved, q.requestable(i))
        q.fs[i] += give
        remaining -= give
    if remaining <= 0:
        for i in members:
            q.reason[i] = _reason(q, i, REASON_DESERVED_ONLY)
        return
    after_deserved = {i: q.fs[i] for i in members}
    buckets: dict[int, list[int]] = {}
    for i in members:
        buckets.setdefault(q.priority[i], []).append(i)
    priorities = sorted(buckets, reverse=True)
    leftovers = {}
    for p in priorities:
        remaining, leftovers[p] = _divide_bucket(q, remaining, buckets[p])
    for p in priorities:
        if remaining <= 0:
            break
        left = leftovers[p]
        for i in sorted(left, key=lambda i: (-left[i], q.rank[i], i)):
            if remaining == 0:
                break
            give = min(1.0, remaining)
            q.fs[i] += give
            remaining -= give
    # The highest priority of a member that got over-quota: lower-priority members lost the rest to it.
    top = max((q.priority[i] for i in members if q.fs[i] > after_deserved[i]), default=None)
    for i in members:
        if q.weight[i] == 0:
            bound = REASON_NO_WEIGHT
        elif top is not None and top > q.priority[i]:
            bound = REASON_HIGHER_PRIORITY
        elif q.k > 0 and q.usage[i] > 0:
            bound = REASON_USAGE
        else:
            bound = REASON_OVER_QUOTA
        q.reason[i] = _reason(q, i, bound)


def _reason(q: _Queues, i: int, unsatisfied: int) -> int:
    """The reason of queue ``i`` once its level is divided; ``unsatisfied`` when it got less than it asks."""
    if q.requestable(i) <= q.fs[i]:
        limit = q.limit[i]
        return REASON_LIMIT if limit != UNLIMITED and limit < q.request[i] else REASON_REQUESTED
    return unsatisfied


def _divide_bucket(q: _Queues, remaining: float, bucket: list[int]) -> tuple[float, dict[int, float]]:
    """Over-quota rounds inside one priority bucket; return what is left and the rounded-off fractions."""
    left: dict[int, float] = {}
    while True:
        again = False
        amount = remaining
        total_weight = 0.0
        for i in bucket:
            if q.remaining_requested(i) > 0:
                total_weight += q.weight[i]
        if total_weight == 0:
            break
        share_weight = {}
        weight_sum = 0.0
        for i in bucket:
            if q.satisfied(i):
                continue
            nw = q.weight[i] / total_weight
            sw = max(0.0, nw + q.k * (nw - q.usage[i]))
            share_weight[i] = sw
            weight_sum += sw
        if weight_sum == 0:
            break
        for i in bucket:
            if remaining == 0:
                break
            if q.satisfied(i):
                continue
            requested = q.remaining_requested(i)
            if q.weight[i] == 0:
                continue
            share = amount * (share_weight[i] / weight_sum)
            if requested <= share:
                give = requested
                left.pop(i, None)
            else:
                give = 0.0
                rounded = float(math.floor(share))
                if rounded > 0:
                    give = rounded
                if share - give > 0:
                    left[i] = share - give
            if give == 0:
                continue
            q.fs[i] += give
            remaining -= give
            again = again or requested < share
        if not again or remaining == 0:
            break
    return remaining, left
