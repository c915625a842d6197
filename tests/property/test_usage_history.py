"""The in-process usage history against a second-by-second reference, on random records and reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.framework.usage import UsageParams
from kai.usagedb.inprocess import InProcessUsage

QUEUES = ("a", "b", "c")


def reference(records, params: UsageParams, now: int) -> dict[str, tuple]:
    """Sum over each second s inside the window of what the latest record at or before s held,
    weighted by the decay at s + 1/2."""
    start = params.window_start(now)
    held = {}
    capacity = [0.0] * 3
    for s in range(int(start), now):
        current = [r for r in records if r[0] <= s]
        if s < start or not current:
            continue
        _, cap, allocations = current[-1]
        w = params.decay(now - s - 0.5)
        for r in range(3):
            capacity[r] += w * cap[r]
        for q, amounts in allocations.items():
            acc = held.setdefault(q, [0.0] * 3)
            for r in range(3):
                acc[r] += w * amounts[r]
    return {q: tuple(v / c if c > 0 else 0.0 for v, c in zip(acc, capacity)) for q, acc in held.items()}


@st.composite
def histories(draw):
    steps = draw(st.lists(st.tuples(st.integers(1, 25), st.booleans()), min_size=1, max_size=30))
    records, t = [], draw(st.integers(0, 10))
    for gap, read in steps:
        cap = [draw(st.sampled_from([0.0, 8.0, 16.0])) for _ in range(3)]
        allocations = {q: [draw(st.sampled_from([0.0, 1.0, 4.0])) for _ in range(3)]
                       for q in QUEUES if draw(st.booleans())}
        records.append((t, cap, allocations, read))
        t += gap
    params = UsageParams(resolution=1.0, window=float(draw(st.integers(5, 60))),
                         half_life=draw(st.sampled_from([None, 3.0, 20.0])),
                         window_type=draw(st.sampled_from(["sliding", "tumbling"])),
                         tumbling_start=float(draw(st.integers(-30, 30))))
    return records, params, t


@settings(max_examples=200)
@given(histories())
def test_history_matches_the_second_by_second_sum(data):
    records, params, end = data
    history = InProcessUsage(params)
    history.REBASE = 2.0  # re-base often, to check it changes nothing
    seen = []
    for t, cap, allocations, read in records:
        history.add(float(t), cap, allocations)
        seen.append((t, cap, allocations))
        if read:
            _check(history.usage(float(t) + 1), reference(seen, params, t + 1))
    _check(history.usage(float(end)), reference(seen, params, end))


def _check(got, want):
    for q in set(got) | set(want):
        assert got.get(q, (0.0,) * 3) == pytest.approx(want.get(q, (0.0,) * 3), rel=1e-9, abs=1e-12), q
