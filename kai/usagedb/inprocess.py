"""Usage from this scheduler's own allocations (``in-process``; KAI's ``fake-with-history`` reads the same).

The scheduler records what each queue holds after every session, with the time; the window and
half-life are applied when usage is read. Each record counts for the time until the next one, so
the result does not depend on how often cycles run.
"""

from __future__ import annotations

import math
from typing import cast

from kai.framework.usage import Usage, UsageParams, cluster_capacity, queue_allocations


class InProcessUsage:
    """Usage from this scheduler's own allocations, recorded after each session.

    Each record holds until the next one. Records are summed (time-weighted) into buckets of
    ``max(resolution, window / MAX_BUCKETS)`` seconds, so memory does not grow with the number of
    cycles. A bucket wholly inside the window counts with the decay at its middle, through running
    sums that make a read cost one pass over the queues; the bucket the window starts in counts in
    proportion to its part inside, and the latest record up to now is added as it stands. The
    running sums are rebuilt when a bucket leaves the window (once per bucket width).
    """

    MAX_BUCKETS = 256
    #: Half-lives between re-based running sums (keeps the decay factors far from overflow).
    REBASE = 256.0

    def __init__(self, params: UsageParams):
        self.params = params
        self.width = max(params.resolution, params.window / self.MAX_BUCKETS)
        #: Bucket index -> (capacity integral, allocation integral by queue), in seconds x amount.
        self.buckets: dict[int, tuple[list[float], dict[str, list[float]]]] = {}
        #: The latest record (time, capacity, allocations), held until now.
        self.last: tuple[float, list[float], dict[str, list[float]]] | None = None
        # Running sums over buckets from index ``first`` on, each weighted by its decay relative to ``ref``.
        self.first: int | None = None
        self.ref = 0.0
        self.cap_sum = [0.0, 0.0, 0.0]
        self.held_sum: dict[str, list[float]] = {}

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def record(self, session) -> None:
        self.add(session.now, cluster_capacity(session), queue_allocations(session))

    def add(self, now: float, capacity: list[float], allocations: dict[str, list[float]]) -> None:
        """Record what the queues hold from ``now`` on (a record at or before the latest one replaces it)."""
        if self.last is not None:
            if now > self.last[0]:
                self._integrate(self.last, now)
            else:
                now = self.last[0]
        self.last = (now, list(capacity), {q: list(v) for q, v in allocations.items()})
        # a cron window may reach back further than windowSize: keep what its last reset still counts
        horizon = math.floor(min(now - self.params.window, self.params.window_start(now)) / self.width)
        for k in [k for k in self.buckets if k < horizon]:
            del self.buckets[k]

    def usage(self, now: float) -> Usage:
        start = self.params.window_start(now)
        first = math.ceil(start / self.width)  # the first bucket wholly inside the window
        half_life = self.params.half_life
        # Sums are only ever added to; when buckets leave them (once per bucket width) they are rebuilt.
        if first != self.first or (half_life and now - self.ref > self.REBASE * half_life):
            self._rebuild(first, now)
        scale = self.params.decay(now - self.ref)
        capacity = [scale * c for c in self.cap_sum]
        held = {q: [scale * v for v in acc] for q, acc in self.held_sum.items()}
        edge = self.buckets.get(first - 1)
        if edge is not None:  # the bucket the window starts in, in proportion
            begin, end = (first - 1) * self.width, min(first * self.width, now)
            if end > start:
                _accumulate(capacity, held, (end - start) / (end - begin) * self.params.decay(now - (start + end) / 2),
                            *edge)
        if self.last is not None:
            t, cap, allocations = self.last
            for _, a, b in self._pieces(max(t, start), now):
                _accumulate(capacity, held, (b - a) * self.params.decay(now - (a + b) / 2), cap, allocations)
        return cast(Usage, {q: tuple(max(0.0, v) / c if c > 0 else 0.0 for v, c in zip(acc, capacity))
                            for q, acc in held.items()})

    # --- buckets and running sums ----------------------------------------------------------------------

    def _pieces(self, begin: float, end: float):
        """(bucket index, from, to) of ``[begin, end)`` cut at bucket boundaries."""
        while begin < end:
            k = math.floor(begin / self.width)
            stop = min(end, (k + 1) * self.width)
            yield k, begin, stop
            begin = stop

    def _factor(self, k: int) -> float:
        return self.params.decay(self.ref - (k + 0.5) * self.width)

    def _integrate(self, record, end: float) -> None:
        t, capacity, allocations = record
        for k, a, b in self._pieces(t, end):
            cap, held = self.buckets.setdefault(k, ([0.0, 0.0, 0.0], {}))
            _accumulate(cap, held, b - a, capacity, allocations)
            if self.first is not None and k >= self.first:
                _accumulate(self.cap_sum, self.held_sum, (b - a) * self._factor(k), capacity, allocations)

    def _rebuild(self, first: int, now: float) -> None:
        self.first, self.ref = first, now
        self.cap_sum, self.held_sum = [0.0, 0.0, 0.0], {}
        for k, (cap, held) in self.buckets.items():
            if k >= first:
                _accumulate(self.cap_sum, self.held_sum, self._factor(k), cap, held)


def _accumulate(capacity: list[float], held: dict[str, list[float]], weight: float, cap, allocations) -> None:
    """Add ``weight`` times a capacity vector and per-queue amounts to running totals."""
    for r in range(3):
        capacity[r] += weight * cap[r]
    for queue, amounts in allocations.items():
        acc = held.get(queue)
        if acc is None:
            acc = held[queue] = [0.0, 0.0, 0.0]
        for r in range(3):
            acc[r] += weight * amounts[r]
